"""Bad inputs and failing runs: every check happens before any kernel runs, with the exact message."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from runtime_helpers import EMBED_KERNELS, MLP_KERNELS, embed_program, mlp_program, write_test_package

RNG = np.random.default_rng(7)


def x_of(*shape, dtype=np.float32) -> np.ndarray:
    return RNG.uniform(-1, 1, size=shape).astype(dtype)


def ids_of(batch: int, seq: int) -> np.ndarray:
    return RNG.integers(0, 16, size=(batch, seq))


def run_error(session, inputs):
    with pytest.raises(Exception) as info:
        session.run(inputs)
    return info.value


@pytest.fixture
def mlp(rt, mlp_package):
    return rt.Model(mlp_package).session()


@pytest.fixture
def embed(rt, embed_package):
    return rt.Model(embed_package).session()


def test_wrong_dtype(rt, mlp):
    e = run_error(mlp, [x_of(2, 32, dtype=np.int64)])
    assert isinstance(e, rt.AotpackError) and isinstance(e, RuntimeError)
    assert e.code == rt.StatusCode.INVALID_ARGUMENT
    assert str(e) == 'input "x": dtype is int64, expected float32'


def test_wrong_rank(rt, mlp):
    e = run_error(mlp, [x_of(2, 32, 1)])
    assert e.code == rt.StatusCode.INVALID_ARGUMENT
    assert str(e) == 'input "x": rank is 3, expected 2'


def test_static_dim_mismatch(rt, mlp):
    e = run_error(mlp, [x_of(2, 31)])
    assert e.code == rt.StatusCode.INVALID_ARGUMENT
    assert str(e) == 'input "x" dim 1 = 31, expected 32'


@pytest.mark.parametrize(
    "batch,seq,message",
    [
        (1, 4096, 'input "input_ids" dim 1 (seq) = 4096 is outside the declared range 1..2048'),
        (5, 3, 'input "input_ids" dim 0 (batch) = 5 is outside the declared range 1..4'),
        (0, 3, 'input "input_ids" dim 0 (batch) = 0 is outside the declared range 1..4'),
    ],
)
def test_symbol_out_of_range(rt, embed, batch, seq, message):
    e = run_error(embed, [ids_of(batch, seq), x_of(batch, seq)])
    assert e.code == rt.StatusCode.OUT_OF_RANGE
    assert str(e) == message


def test_mlp_batch_above_max(rt, mlp):
    e = run_error(mlp, [x_of(65, 32)])
    assert str(e) == 'input "x" dim 0 (batch) = 65 is outside the declared range 1..64'


def test_inconsistent_symbol_across_inputs(rt, embed):
    e = run_error(embed, [ids_of(1, 8), x_of(1, 7)])
    assert e.code == rt.StatusCode.INVALID_ARGUMENT
    assert str(e) == 'input "mask" dim 1 (seq) = 7, but input "input_ids" dim 1 gave seq = 8'


def test_missing_input_positional(rt, embed):
    e = run_error(embed, [ids_of(1, 8)])
    assert e.code == rt.StatusCode.INVALID_ARGUMENT
    assert str(e) == 'input "mask" is missing: the model takes 2 inputs (input_ids, mask), got 1'


def test_missing_and_extra_input_by_name(rt, embed):
    e = run_error(embed, {"input_ids": ids_of(1, 8)})
    assert e.code == rt.StatusCode.INVALID_ARGUMENT and 'input "mask" is missing' in str(e)
    e = run_error(embed, {"input_ids": ids_of(1, 8), "mask": x_of(1, 8), "bogus": x_of(1)})
    assert "'bogus'" in str(e)


def test_too_many_inputs(rt, mlp):
    e = run_error(mlp, [x_of(2, 32), x_of(2, 32)])
    assert str(e) == "the model takes 1 inputs (x), got 2"
    # whatever the extra one is: its count is what is wrong, not its dtype
    for extra in (np.zeros(3, dtype=np.complex64), "text", None):
        e = run_error(mlp, [x_of(2, 32), extra])
        assert str(e) == "the model takes 1 inputs (x), got 2"


def test_unsupported_numpy_dtype(rt, mlp):
    e = run_error(mlp, [np.zeros((2, 32), dtype=np.complex64)])
    assert e.code == rt.StatusCode.INVALID_ARGUMENT and "complex64" in str(e)


def test_null_data_pointer_through_the_c_api(rt, mlp):
    shape = (ctypes.c_int64 * 2)(2, 32)
    tensor = rt._Tensor(0, 2, shape, None)
    status = rt.lib().aotpack_session_run(mlp._handle, ctypes.byref(tensor), 1)
    with pytest.raises(rt.AotpackError) as info:
        rt._check(status)
    assert info.value.code == rt.StatusCode.INVALID_ARGUMENT
    assert str(info.value) == 'input "x": data is NULL'
    # And a NULL shape for a rank-2 tensor.
    data = x_of(2, 32)
    tensor = rt._Tensor(0, 2, None, data.ctypes.data)
    with pytest.raises(rt.AotpackError, match='input "x": shape is NULL'):
        rt._check(rt.lib().aotpack_session_run(mlp._handle, ctypes.byref(tensor), 1))


def test_failed_run_leaves_no_outputs_then_recovers(rt, mlp):
    mlp.run([x_of(3, 32)])
    run_error(mlp, [x_of(3, 31)])
    out = rt._Tensor()
    with pytest.raises(rt.AotpackError, match="no successful run"):
        rt._check(rt.lib().aotpack_session_output(mlp._handle, 0, ctypes.byref(out)))
    (y,) = mlp.run([x_of(3, 32)])
    assert y.shape == (3, 10)


def test_kernel_report_error_names_step_and_kernel(rt, embed, embed_table):
    ids = ids_of(2, 3)
    ids[1, 2] = 17
    e = run_error(embed, [ids, x_of(2, 3)])
    assert e.code == rt.StatusCode.INVALID_ARGUMENT
    assert str(e) == "step 0 (kernel k_embed) failed: index 17 is out of range for a table of 16 rows"
    # Only the first message is kept, and the session works again afterwards.
    ids[0, 0] = -4
    e = run_error(embed, [ids, x_of(2, 3)])
    assert str(e) == "step 0 (kernel k_embed) failed: index -4 is out of range for a table of 16 rows"
    good = ids_of(2, 3)
    mask = x_of(2, 3)
    emb, _ = embed.run([good, mask])
    np.testing.assert_allclose(emb, embed_table[good] * mask[..., None], rtol=1e-6)


def test_buffer_smaller_than_its_shape_at_the_maxima_is_refused_at_load(rt, packages_dir):
    """A max_bytes too small for the declared maxima used to fail the first run that needed more (an INTERNAL
    error at batch 11); plan_check refuses the package before any session exists."""
    program = mlp_program()
    program["buffers"][-1]["max_bytes"] = 400  # 10 rows of 10 floats; batch 11 needs 440
    weights = {
        "fc1.weight": x_of(32, 64),
        "fc1.bias": x_of(64),
        "fc2.weight": x_of(64, 10),
        "fc2.bias": x_of(10),
    }
    path = write_test_package(packages_dir / "small_output.aotpack", program, MLP_KERNELS, weights)
    with pytest.raises(rt.AotpackError) as info:
        rt.Model(path)
    assert info.value.code == rt.StatusCode.DATA_LOSS
    assert str(info.value) == (
        f'package {path}: program.json: buffers[6]: buffer 5 (output float32 ["batch", 10]) takes 2560 bytes at '
        "batch=64, more than its max_bytes 400"
    )


def test_expression_overflow_is_refused_at_load(rt, packages_dir):
    """A size that overflows int64 within the declared ranges is found at load (plan_check evaluates every
    buffer at the maxima), not by the first run that reaches it."""
    program = embed_program()
    program["buffers"][4]["shape"] = [["*", "batch", "seq", 4611686018427387904]]
    path = write_test_package(
        packages_dir / "overflow.aotpack", program, EMBED_KERNELS, {"table": x_of(16, 8)}
    )
    with pytest.raises(rt.AotpackError) as info:
        rt.Model(path)
    e = info.value
    assert "overflows int64" in str(e) and 'buffers[4]: buffer 4 (output int64 [["*", "batch", "seq"' in str(e)


def test_session_options(rt, mlp_package):
    model = rt.Model(mlp_package)
    with pytest.raises(rt.AotpackError) as info:
        model.session(num_threads=0)
    assert info.value.code == rt.StatusCode.INVALID_ARGUMENT and "num_threads is 0" in str(info.value)
    with pytest.raises(rt.AotpackError) as info:
        rt.Session(model, device="cuda")
    assert info.value.code == rt.StatusCode.UNSUPPORTED
    assert "the package has no CUDA kernels" in str(info.value)


def test_bfloat16_and_float16_inputs(rt, packages_dir):
    """uint16 arrays stand for bfloat16 bits; np.float16 is float16."""
    kernels = """
extern "C" void k_widen(const aotpack_kernel_ctx*, void* const* buf, const int64_t* sym) {
  const uint16_t* b = (const uint16_t*)buf[0];
  const _Float16* h = (const _Float16*)buf[1];
  float* out = (float*)buf[2];
  uint16_t* copy = (uint16_t*)buf[3];
  for (int64_t i = 0; i < sym[0]; ++i) {
    uint32_t bits = (uint32_t)b[i] << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    out[i] = f + (float)h[i];
    copy[i] = b[i];
  }
}
"""
    program = {
        "symbols": [{"name": "n", "min": 1, "max": 16}],
        "inputs": [{"name": "b", "buffer": 0}, {"name": "h", "buffer": 1}],
        "outputs": [{"name": "sum", "buffer": 2}, {"name": "copy", "buffer": 3}],
        "buffers": [
            {"id": 0, "kind": "input", "dtype": "bfloat16", "shape": ["n"], "input": 0},
            {"id": 1, "kind": "input", "dtype": "float16", "shape": ["n"], "input": 1},
            {"id": 2, "kind": "output", "dtype": "float32", "shape": ["n"], "output": 0, "max_bytes": 64},
            {"id": 3, "kind": "output", "dtype": "bfloat16", "shape": ["n"], "output": 1, "max_bytes": 32},
        ],
        "arena_bytes": 0,
        "steps": [{"kernel": "k_widen", "args": [0, 1, 2, 3]}],
    }
    path = write_test_package(packages_dir / "halves.aotpack", program, kernels, {})
    model = rt.Model(path)
    assert model.inputs[0].dtype == "bfloat16" and model.inputs[1].dtype == np.float16
    f = x_of(5)
    bf16_bits = (f.view(np.uint32) >> 16).astype(np.uint16)  # truncation is exact for these bits
    h = x_of(5).astype(np.float16)
    total, copy = model.session().run([bf16_bits, h])
    expected = (bf16_bits.astype(np.uint32) << 16).view(np.float32) + h.astype(np.float32)
    np.testing.assert_allclose(total, expected, rtol=1e-6)
    assert copy.dtype == np.uint16
    np.testing.assert_array_equal(copy, bf16_bits)
    e = run_error(model.session(), [f, h])
    assert str(e) == 'input "b": dtype is float32, expected bfloat16'


def test_array_layouts_are_accepted(rt, mlp, mlp_weights_np):
    from runtime_helpers import mlp_reference

    x = x_of(32, 6).T  # not contiguous
    (y,) = mlp.run([x])
    np.testing.assert_allclose(y, mlp_reference(x, mlp_weights_np), rtol=1e-5, atol=1e-5)
    (y,) = mlp.run([x.astype(">f4")])  # big-endian
    np.testing.assert_allclose(y, mlp_reference(x, mlp_weights_np), rtol=1e-5, atol=1e-5)
    e = run_error(mlp, x_of(2, 32))
    assert "not one array" in str(e)
