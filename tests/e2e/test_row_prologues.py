"""Row kernels moved into the matrix product that reads them (lowering/ir/row_prologue.py), through the real
pipeline on the CPU: an export with its defaults (verification on) makes them, and a package built with the
move computes bit for bit what one built without it computes, in the C++ runtime (the product folds each
row as the row kernel did, in the same lanes)."""

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
from aotpack.verification.compare import from_runtime

MODEL = Path(__file__).resolve().parent / "row_models" / "prenorm.py"


def lowered(spec):
    plan = resolve_symbols(spec)
    return stages.lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).steps


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_products_that_compute_their_norms_match_the_row_kernels_bit_for_bit(dtype, runtime_build, rt, tmp_path,
                                                                              monkeypatch):
    spec = with_dtype(load_model_file(MODEL), dtype)
    steps = lowered(spec)
    # the embedding's layer norm, the RMS norm (in both products that read it) and the softmax each inside
    # the product that reads it
    assert [s.family for s in steps] == ["matmul"] * 4, steps
    assert [[r.op for r in s.a_reductions] for s in steps] == [["sum", "sum"], ["sum"], ["sum"], ["max", "sum"]]
    fused = export_spec(spec, tmp_path / "fused.aotpack")
    assert fused.manifest["verification"]["passed"]
    monkeypatch.setattr(stages, "fuse_row_prologues", lambda program: program)
    assert [s.family for s in lowered(spec)].count("row") == 3
    plain = export_spec(with_dtype(load_model_file(MODEL), dtype), tmp_path / "plain.aotpack")
    fused_session, plain_session = rt.Model(fused.path).session(), rt.Model(plain.path).session()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for batch, seq in ((1, 1), (2, 7), (4, 40)):
            ids = torch.randint(0, 12, (batch, seq), generator=gen)
            (a,), (b,) = fused_session.run([ids.numpy()]), plain_session.run([ids.numpy()])
            assert a.shape == (batch, seq, 20) and np.array_equal(a, b), f"{batch} x {seq}: fused and unfused differ"
            expected = spec.model(ids).float().numpy()
            error = np.abs(from_runtime(a, dtype).astype(np.float32) - expected).max()
            assert error < (1e-4 if dtype == torch.float32 else 0.05), error


def test_an_index_checked_in_a_products_prologue_is_reported(runtime_build, rt, tmp_path):
    exported = export_spec(load_model_file(MODEL), tmp_path / "prenorm.aotpack")
    session = rt.Model(exported.path).session()
    with pytest.raises(rt.AotpackError, match=r"embedding at .*: an index is outside 0\.\.12-1"):
        session.run([np.array([[3, 1, 12, 1, 5]], dtype=np.int64)])
    (out,) = session.run([np.array([[3, 1, 11, 1, 5]], dtype=np.int64)])  # the session still runs after it
    assert np.isfinite(out).all() and np.abs(out).max() > 0
