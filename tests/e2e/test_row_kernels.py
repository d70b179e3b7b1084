"""Row kernels (lowering/ir/row_fusion.py) through the real pipeline on the CPU: an export with its defaults
(verification on) makes them, and a package built with row fusion computes bit for bit what one built without
it computes, in the C++ runtime."""

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

MODEL = Path(__file__).resolve().parent / "row_models" / "norms.py"


def families(spec) -> list[str]:
    plan = resolve_symbols(spec)
    return [s.family for s in stages.lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).steps]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_kernels_compute_what_the_unfused_program_did(dtype, runtime_build, rt, tmp_path, monkeypatch):
    spec = with_dtype(load_model_file(MODEL), dtype)
    steps = families(spec)
    # layer norm, softmax, RMS norm, the min, the any and the blocks each one row kernel; the output row sum
    # stays a reduction
    assert steps.count("row") == 6 and steps.count("reduction") == 1, steps
    fused = export_spec(spec, tmp_path / "fused.aotpack")
    assert fused.manifest["verification"]["passed"]
    monkeypatch.setattr(stages, "fuse_rows", lambda program: program)
    assert "row" not in families(spec)
    plain = export_spec(with_dtype(load_model_file(MODEL), dtype), tmp_path / "plain.aotpack")
    fused_session, plain_session = rt.Model(fused.path).session(), rt.Model(plain.path).session()
    gen = torch.Generator().manual_seed(0)
    for n in (1, 5, 64):
        inputs = [to_numpy((torch.randn(n, 50, generator=gen) * 3).to(dtype)) for _ in range(2)]
        for a, b in zip(fused_session.run(inputs), plain_session.run(inputs)):
            assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True), f"n={n}: fused and unfused differ"


def test_an_index_checked_inside_a_row_kernel_is_reported(runtime_build, rt, tmp_path):
    spec = load_model_file(MODEL.parent / "embed_norm.py")
    assert families(spec) == ["row"]  # the gather, its check, the mean, the variance and the normalising pass
    exported = export_spec(spec, tmp_path / "embed_norm.aotpack")
    assert exported.manifest["verification"]["passed"]
    session = rt.Model(exported.path).session()
    ids = np.array([3, 1, 4, 1, 5], dtype=np.int64)
    (out,) = session.run([ids])
    with torch.no_grad():
        expected = spec.model(torch.from_numpy(ids)).numpy()
    assert np.abs(out - expected).max() < 1e-5
    with pytest.raises(rt.AotpackError, match=r"embedding at .*: an index is outside 0\.\.10-1"):
        session.run([np.array([3, 1, 12, 1, 5], dtype=np.int64)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_folded_norms_compute_what_eager_does(dtype, runtime_build, rt, tmp_path, monkeypatch):
    """ir/norm_folding.py through the C++ backend: the three norms of norm_producers.py folded (the rows' sums
    written by the products that store them, the norms applied in their readers' epilogues), verified against
    eager at export and against the package that keeps its norms."""
    from aotpack.lowering.ir import norm_folding

    model = MODEL.parent / "norm_producers.py"
    plain = export_spec(with_dtype(load_model_file(model), dtype), tmp_path / "plain.aotpack")
    monkeypatch.setattr(norm_folding, "ENABLED", True)
    spec = with_dtype(load_model_file(model), dtype)
    assert "row" not in families(spec)
    folded = export_spec(spec, tmp_path / "folded.aotpack")
    assert folded.manifest["verification"]["passed"]
    folded_session, plain_session = rt.Model(folded.path).session(), rt.Model(plain.path).session()
    gen = torch.Generator().manual_seed(0)
    for batch, seq in ((1, 1), (2, 7), (4, 40)):
        x = (torch.randn(batch, seq, 24, generator=gen) * 2).to(dtype)
        (a,), (b,) = folded_session.run([to_numpy(x)]), plain_session.run([to_numpy(x)])
        with torch.no_grad():
            eager = spec.model(x).float().numpy()
        # float32: both within rounding of eager; bfloat16: the folded package no further from eager than
        # the one that rounds each norm's output before its product, give or take one bfloat16 step
        folded_error, plain_error = (float(np.abs(from_runtime(o, dtype) - eager).max()) for o in (a, b))
        scale = float(np.abs(eager).max())
        if dtype == torch.float32:
            assert max(folded_error, plain_error) <= 1e-5 * scale, f"{batch}x{seq}"
        else:
            assert folded_error <= plain_error + 2 ** -7 * scale, f"{batch}x{seq}: {folded_error} {plain_error}"


@pytest.mark.parametrize("example", ["gpt2", "llama", "bert"])
def test_example_norms_fold_and_verify(example, runtime_build, tmp_path, monkeypatch):
    """The examples with the fold on, bfloat16, verified on the CPU at export: GPT-2 keeps the norm of its
    embeddings and the final one (its output is tied to the embedding), Llama the first, BERT all (post-norm:
    each norm's output is also the next residual)."""
    from aotpack.lowering.ir import norm_folding

    spec = with_dtype(load_model_file(Path(__file__).resolve().parents[2] / "examples" / example / "model.py"),
                      torch.bfloat16)
    before = families(spec).count("row")
    monkeypatch.setattr(norm_folding, "ENABLED", True)
    after = families(spec).count("row")
    assert before - after == {"gpt2": 3, "llama": 4, "bert": 0}[example], (before, after)
    assert export_spec(spec, tmp_path / f"{example}.aotpack").manifest["verification"]["passed"]
