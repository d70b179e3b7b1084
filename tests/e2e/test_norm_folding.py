"""Norms folded into the products that read them (lowering/ir/norm_folding.py), through the real pipeline on
the CPU: an export with its defaults (verification on) folds the pre-norm layer and RMS norms and leaves the
ones it must, and the package is as close to float64 eager as one built without folding, in the C++ runtime,
on rows far from zero mean and on rows with no spread at all (where rstd is 1 / sqrt(eps))."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from aotpack.api import export_spec
from aotpack.exporter import capture, load_model_file, resolve_symbols
from aotpack.exporter.dtype import with_dtype
from aotpack.lowering import stages
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.verification import to_numpy
from aotpack.verification.compare import from_runtime

MODEL = Path(__file__).resolve().parent / "row_models" / "folded_norms.py"


def lowered(spec):
    plan = resolve_symbols(spec)
    return stages.lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))


def test_pre_norms_fold_and_the_others_stay_row_kernels():
    program = lowered(load_model_file(MODEL))
    # the layer norm into `up` and the RMS norm into `gate` and `value` are gone; the post-norm (also the
    # residual) and the final norm (into the tied embedding) stay
    assert [s.family for s in program.steps].count("row") == 2
    assert {"up.weight.norm_folded", "gate.weight.norm_folded", "value.weight.norm_folded"} <= set(program.weights)
    assert "embed.weight" in program.weights and not any(w.startswith("embed.weight.") for w in program.weights)
    assert "norm.weight" not in program.weights and "rms_weight" not in program.weights
    # gamma folded into the weight; the mean's and the bias's terms per column: the column sums of the folded
    # weight as stored (nn.Linear's [n, k]), and beta @ W
    model = load_model_file(MODEL).model
    with torch.no_grad():
        w, gamma, beta = model.up.weight.double(), model.norm.weight.double(), model.norm.bias.double()
        folded = program.weights["up.weight.norm_folded"]
        assert torch.equal(folded, (w * gamma).to(torch.float32))
        terms = sorted((program.weights[f"up.weight.norm_term{j}"] for j in range(2)), key=lambda t: float(t[0]))
        expected = sorted((folded.double().sum(1).to(torch.float32), (w @ beta).to(torch.float32)),
                          key=lambda t: float(t[0]))
        assert all(torch.equal(a, b) for a, b in zip(terms, expected))


def _inputs(dtype, gen, batch, seq, *, offset=0.0, flat=False):
    x = torch.randn(batch, seq, 50, generator=gen) * 3 + offset
    if flat:  # every row one value: the variance is nil, the normalised row zero
        x = x[..., :1].expand(batch, seq, 50).contiguous()
    ids = torch.randint(0, 40, (batch, seq), generator=gen)
    return [to_numpy(x.to(dtype)), to_numpy(ids)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_folded_package_computes_what_the_unfolded_one_does(dtype, runtime_build, rt, tmp_path, monkeypatch):
    spec = with_dtype(load_model_file(MODEL), dtype)
    folded = export_spec(spec, tmp_path / "folded.aotpack")
    assert folded.manifest["verification"]["passed"]
    monkeypatch.setattr(stages, "fold_norms", lambda program: program)
    assert [s.family for s in lowered(spec).steps].count("row") == 4
    plain = export_spec(with_dtype(load_model_file(MODEL), dtype), tmp_path / "plain.aotpack")
    folded_session, plain_session = rt.Model(folded.path).session(), rt.Model(plain.path).session()
    gen = torch.Generator().manual_seed(0)
    reference = load_model_file(MODEL).model.double()
    slack = 1e-5 if dtype == torch.float32 else 1e-2
    cases = [dict(batch=1, seq=1), dict(batch=3, seq=17), dict(batch=4, seq=40), dict(batch=2, seq=9, offset=40.0),
             dict(batch=2, seq=9, flat=True)]
    for case in cases:
        inputs = _inputs(dtype, gen, **case)
        with torch.no_grad():
            expected = reference(torch.from_numpy(from_runtime(inputs[0], dtype)).double(), torch.from_numpy(inputs[1]))
        for name, a, b, e in zip(("logits", "embedding"), folded_session.run(inputs), plain_session.run(inputs), expected):
            a, b, e = from_runtime(a, dtype).astype(np.float64), from_runtime(b, dtype).astype(np.float64), e.numpy()
            assert np.isfinite(a).all(), f"{case}: the folded package gave a non-finite value"
            scale = max(np.abs(e).max(), 1.0)
            folded_error, plain_error = np.abs(a - e).max() / scale, np.abs(b - e).max() / scale
            # no worse than twice the unfolded package's error, plus the float32 allowance (or bfloat16's ulp)
            assert folded_error <= 2 * plain_error + slack, \
                f"{case} {name}: folded error {folded_error:.2e} against the unfolded package's {plain_error:.2e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_sum_every_reader_makes_is_stored_by_the_product_bit_for_bit(dtype, runtime_build, rt, tmp_path,
                                                                       monkeypatch):
    """ir/shared_combination.py: the residual sum that the norm and the last add both read is stored by the
    projection's epilogue, the program computing what it did (in float32 bit for bit); the norm then folds
    into `up`."""
    model = MODEL.parent / "residual_sum.py"
    spec = with_dtype(load_model_file(model), dtype)
    assert [s.family for s in lowered(spec).steps] == ["matmul"] * 3
    monkeypatch.setattr(stages, "fold_norms", lambda program: program)
    assert [s.family for s in lowered(spec).steps] == ["matmul", "row", "matmul", "matmul"]
    stored = export_spec(spec, tmp_path / "stored.aotpack")
    monkeypatch.setattr(stages, "fuse_shared_combinations", lambda program: program)
    assert [s.family for s in lowered(spec).steps] == ["matmul", "row", "matmul", "matmul"]
    recomputed = export_spec(with_dtype(load_model_file(model), dtype), tmp_path / "recomputed.aotpack")
    assert stored.manifest["verification"]["passed"] and recomputed.manifest["verification"]["passed"]
    a_session, b_session = rt.Model(stored.path).session(), rt.Model(recomputed.path).session()
    gen = torch.Generator().manual_seed(1)
    for batch, seq in ((1, 1), (3, 17), (4, 40)):
        inputs = [to_numpy((torch.randn(batch, seq, 50, generator=gen) * 2).to(dtype)) for _ in range(2)]
        (a,), (b,) = a_session.run(inputs), b_session.run(inputs)
        if dtype == torch.float32:
            assert a.shape == b.shape and np.array_equal(a, b), f"{batch} x {seq}: storing the sum changed it"
        else:  # stored, the sum is rounded to bfloat16 (as eager stores it), where the readers kept it in float
            a, b = from_runtime(a, dtype), from_runtime(b, dtype)
            assert np.abs(a - b).max() <= 2 ** -7 * np.abs(b).max(), f"{batch} x {seq}: more than rounding apart"
