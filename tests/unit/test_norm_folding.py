"""ir/norm_folding.py: norms between products folded into them (the producer sums its rows, the reader applies the
norm in its epilogue through weights made at export), and what keeps its norm. The numbers: here in Triton's
interpreter; tests/e2e/test_row_kernels.py exports through the C++ backend with verification."""

from __future__ import annotations

from pathlib import Path

import pytest
from aotpack.build import capture_model_file
from aotpack.lowering.ir import norm_folding
from aotpack.lowering.ir.kernels import MatmulKernel, RowKernel
from aotpack.lowering.stages import lower
from interpreter import run_in_interpreter  # tests/unit/interpreter.py

ROW_MODELS = Path(__file__).resolve().parents[1] / "e2e" / "row_models"


@pytest.fixture
def folding(monkeypatch):
    monkeypatch.setattr(norm_folding, "ENABLED", True)


def test_norms_whose_rows_a_product_stores_fold_into_it_and_into_their_readers(folding):
    program = lower(capture_model_file(ROW_MODELS / "norm_producers.py"))
    assert not any(isinstance(s, RowKernel) for s in program.steps)  # layer norm, RMS norm, final layer norm
    producers = [s for s in program.steps if isinstance(s, MatmulKernel) and s.row_sums]
    readers = [s for s in program.steps if isinstance(s, MatmulKernel) and s.row_stats]
    assert len(producers) == len(readers) == 3
    assert {r.row_stats for r in readers} == {p.row_sums for p in producers}
    for sums in (p.row_sums for p in producers):
        assert [int(d) for d in program.buffers[sums].shape[1:]] == [3, 2]  # 48 columns: three groups of 16
    assert sum(r.paired for r in readers) == 1  # the gated MLP's gate and value, one paired product
    for reader in readers:
        assert reader.dtype == "float32" and reader.b.buffer.endswith(".normed")
        assert {f"{reader.b.buffer[: -len('.normed')]}.norm_c{i}" for i in (1, 2)} <= set(reader.epilogue_reads())
    # the residual add left inside the RMS norm moved into the product before it, which stores h + out(...)
    assert sum(".normed" in name for name in program.buffers) == 3


def test_off_by_default_nothing_folds():
    program = lower(capture_model_file(ROW_MODELS / "norm_producers.py"))
    assert sum(isinstance(s, RowKernel) for s in program.steps) == 3
    assert not any(isinstance(s, MatmulKernel) and (s.row_sums or s.row_stats) for s in program.steps)


def test_norms_the_fold_cannot_take_stay(folding):
    """folded_norms.py: a norm of an input (no product wrote it), rows of 50 (not whole groups of 16), a
    post-norm whose output is also the residual, a final norm into an output tied to an embedding."""
    captured = capture_model_file(ROW_MODELS / "folded_norms.py")
    norm_folding.ENABLED = False
    before = lower(captured)
    norm_folding.ENABLED = True
    assert lower(capture_model_file(ROW_MODELS / "folded_norms.py")).steps == before.steps


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from aotpack.lowering.ir import norm_folding
norm_folding.ENABLED = True
from aotpack.build import capture_model_file
from aotpack.lowering.stages import lower
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.verification import relative_error
from test_norm_folding import ROW_MODELS
captured = capture_model_file(ROW_MODELS / "norm_producers.py")
program = lower(captured)
report = {}
torch.manual_seed(0)
for archs in ((), (90,)):  # sm_90: buckets, programmatic dependent launch, few-row epilogues before the k loop
    library = render_triton_library(program, archs)
    for batch, seq in ((1, 1), (2, 5), (3, 17), (4, 40)):
        x = torch.randn(batch, seq, 24) * 2
        with torch.no_grad():
            ref = captured.program.module()(x)
        (out,), errors = run_program(program, library, [x])
        report[f"{archs} {batch}x{seq}"] = [errors, relative_error(out.numpy(), ref.numpy())]
print(json.dumps(report))
"""


def test_the_folded_program_computes_what_eager_does_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert len(report) == 8
    for point, (errors, err) in report.items():
        assert errors == [] and err <= 1e-5, f"{point}: {errors}, relative error {err} from eager"
