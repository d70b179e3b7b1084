"""Loading and running hand-made packages: numbers against numpy, signature, sessions and threads."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import mlp_reference

RNG = np.random.default_rng(1234)


def random_x(batch: int) -> np.ndarray:
    return RNG.uniform(-1, 1, size=(batch, 32)).astype(np.float32)


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-5) -> None:
    err = np.linalg.norm(actual.astype(np.float64) - expected) / max(np.linalg.norm(expected), 1e-30)
    worst = np.unravel_index(np.argmax(np.abs(actual - expected)), expected.shape) if expected.size else ()
    assert err <= rtol, (
        f"relative error {err:.3g} > {rtol}; shapes {actual.shape} {expected.shape}; max abs error "
        f"{np.max(np.abs(actual - expected)):.3g} at {worst}, mean {np.mean(np.abs(actual - expected)):.3g}"
    )


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_mlp_matches_numpy(rt, mlp_package, mlp_weights_np, batch):
    session = rt.Model(mlp_package).session()
    x = random_x(batch)
    (y,) = session.run([x])
    assert y.shape == (batch, 10) and y.dtype == np.float32
    assert_close(y, mlp_reference(x, mlp_weights_np))


def test_mlp_inputs_by_name_and_repeated_runs(rt, mlp_package, mlp_weights_np):
    session = rt.Model(mlp_package).session()
    for batch in (64, 3, 64, 1):
        x = random_x(batch)
        (y,) = session.run({"x": x})
        assert_close(y, mlp_reference(x, mlp_weights_np))


def test_signature_and_manifest(rt, mlp_package, embed_package):
    model = rt.Model(mlp_package)
    assert [i.name for i in model.inputs] == ["x"]
    (x,) = model.inputs
    assert x.dtype == np.float32
    assert x.dims[0] == rt.Dim(None, "batch", 1, 64)
    assert x.dims[1] == rt.Dim(32, None, 32, 32)
    assert x.shape == ("batch", 32)
    assert model.outputs[0].name == "output" and model.outputs[0].shape == ("batch", 10)
    assert model.manifest["format"] == "aotpack" and model.manifest["format_version"] == 1
    assert model.manifest["targets"][0]["library"] == "cpu/x86-64-v3/kernels.so"

    embed = rt.Model(embed_package)
    assert [i.dtype for i in embed.inputs] == [np.int64, np.float32]
    assert embed.outputs[1].name == "flat"
    assert embed.outputs[1].dims == (rt.Dim(None),)  # an expression: neither a size nor a symbol


@pytest.mark.parametrize("batch,seq", [(1, 1), (2, 5), (4, 2048)])
def test_embedding_two_symbols_and_expression_shape(rt, embed_package, embed_table, batch, seq):
    session = rt.Model(embed_package).session()
    ids = RNG.integers(0, 16, size=(batch, seq))
    mask = RNG.uniform(0.5, 1.5, size=(batch, seq)).astype(np.float32)
    emb, flat = session.run({"input_ids": ids, "mask": mask})
    assert emb.shape == (batch, seq, 8)
    assert_close(emb, embed_table[ids] * mask[..., None])
    assert flat.shape == (batch * seq,) and flat.dtype == np.int64
    np.testing.assert_array_equal(flat, ids.reshape(-1) + 1)


@pytest.mark.parametrize("num_threads", [1, 4])
def test_parallel_for_uses_the_session_threads(rt, threads_package, num_threads):
    session = rt.Model(threads_package).session(num_threads=num_threads)
    for n in (64, 1, 4096, 5):
        x = RNG.uniform(-1, 1, size=n).astype(np.float32)
        y, info = session.run([x])
        np.testing.assert_array_equal(y, 2 * x + 1)
        assert info[1] == num_threads
        if n >= 64:
            assert (info[0] > 1) == (num_threads > 1), f"threads seen: {info[0]}"
        else:
            assert 1 <= info[0] <= num_threads


def test_mlp_with_threads_matches_numpy(rt, mlp_package, mlp_weights_np):
    session = rt.Model(mlp_package).session(num_threads=3)
    x = random_x(61)
    (y,) = session.run([x])
    assert_close(y, mlp_reference(x, mlp_weights_np))


def test_one_model_many_sessions_in_threads(rt, mlp_package, mlp_weights_np):
    model = rt.Model(mlp_package)
    errors = []

    def work(seed: int) -> None:
        try:
            session = model.session(num_threads=2)
            rng = np.random.default_rng(seed)
            for _ in range(20):
                x = rng.uniform(-1, 1, size=(int(rng.integers(1, 65)), 32)).astype(np.float32)
                (y,) = session.run([x])
                assert_close(y, mlp_reference(x, mlp_weights_np))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_two_packages_with_same_kernel_names_stay_apart(rt, packages_dir, mlp_package, mlp_weights_np):
    """Each package's library is loaded privately: a second MLP with other weights and a changed kernel."""
    from runtime_helpers import MLP_KERNELS, mlp_program, mlp_weights, write_test_package

    other_weights = mlp_weights(np.random.default_rng(99))
    # Same kernel names, different code: the second library's output layer adds 1.
    changed = MLP_KERNELS.replace(
        "a->y[r * OUT + o] = RELU && acc < 0 ? 0.0f : acc;",
        "a->y[r * OUT + o] = (RELU && acc < 0 ? 0.0f : acc) + (RELU ? 0.0f : 1.0f);",
    )
    assert changed != MLP_KERNELS
    other = write_test_package(packages_dir / "mlp_other.aotpack", mlp_program(), changed, other_weights)
    first, second = rt.Model(mlp_package), rt.Model(other)
    x = random_x(5)
    (y1,) = first.session().run([x])
    (y2,) = second.session().run([x])
    assert_close(y1, mlp_reference(x, mlp_weights_np))
    assert_close(y2, mlp_reference(x, other_weights) + 1)


def test_load_release_cycles(rt, mlp_package, embed_package, mlp_weights_np):
    """Library handles are reused correctly when models come and go (memfd numbers get reused)."""
    for _ in range(5):
        m = rt.Model(mlp_package)
        x = random_x(2)
        (y,) = m.session().run([x])
        assert_close(y, mlp_reference(x, mlp_weights_np))
        m = None
        e = rt.Model(embed_package)
        assert e.outputs[0].name == "embeddings"
        e = None


def test_outputs_are_copies(rt, mlp_package):
    session = rt.Model(mlp_package).session()
    (y1,) = session.run([random_x(2)])
    saved = y1.copy()
    session.run([random_x(2)])
    np.testing.assert_array_equal(y1, saved)


def test_the_tested_library_is_the_fixture_build(rt, runtime_build):
    assert rt.library_path() == runtime_build / "libaotpack.so"
    rt.lib()  # loaded on first use: load it here, so the check holds when this test runs alone
    maps = Path("/proc/self/maps").read_text()
    assert str(runtime_build / "libaotpack.so") in maps


def test_missing_library_is_a_clear_error(rt, monkeypatch, tmp_path):
    monkeypatch.setenv("AOTPACK_RUNTIME_LIB", str(tmp_path / "nowhere" / "libaotpack.so"))
    with pytest.raises(rt.AotpackError) as info:
        rt.library_path()
    assert info.value.code == rt.StatusCode.NOT_FOUND
    assert "cannot find the aotpack runtime library libaotpack.so" in str(info.value)
    assert "AOTPACK_RUNTIME_LIB" in str(info.value)


def test_a_session_keeps_its_model_alive(rt, mlp_package, mlp_weights_np):
    """Releasing a model while its sessions live is safe in C, and so in Python whatever order the garbage
    collector finalizes them in (it segfaulted when a cycle's model went first)."""
    import ctypes
    import gc

    x = np.random.default_rng(3).standard_normal((5, 32)).astype(np.float32)
    model = rt.Model(mlp_package)
    session = model.session()
    model.close()  # aotpack_model_release: the session's own reference remains
    del model
    gc.collect()
    np.testing.assert_allclose(session.run([x])[0], mlp_reference(x, mlp_weights_np), rtol=1e-5, atol=1e-6)
    lib, handle = rt.lib(), ctypes.c_void_p()
    rt._check(lib.aotpack_model_load(str(mlp_package).encode(), None, ctypes.byref(handle)))
    raw = ctypes.c_void_p()
    rt._check(lib.aotpack_session_create(handle, None, ctypes.byref(raw)))
    lib.aotpack_model_release(handle)
    lib.aotpack_session_destroy(raw)  # the last reference: frees the model too (ASan builds check it)
