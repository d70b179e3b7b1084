"""Row kernels moved into the products that read them (lowering/ir/row_prologue.py): which move, which must stay
(another reader, a layout other than the row kernel's, read as b or stored as an output), and that a batched
product's moved norm computes what eager does (Triton's interpreter; the C++ kernels bit for bit against the
row kernels in tests/e2e/test_row_prologues.py)."""

from __future__ import annotations

import pytest
import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering import stages
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.ir.verify import verify_program
from interpreter import HERE, run_in_interpreter  # tests/unit/interpreter.py
from torch import nn


class Norm(nn.Module):
    """A layer norm over rows of 24 and what reads it (`use`), with a weight for the products."""

    def __init__(self, use: str) -> None:
        super().__init__()
        self.use = use
        self.norm = nn.LayerNorm(24)
        self.w = nn.Parameter(torch.randn(24, 24))

    def forward(self, x: torch.Tensor):
        h = self.norm(x)
        if self.use == "product":
            return h @ self.w
        if self.use == "batched":  # [2, n, 24] @ [2, 24, 24]: a batched product, a's batch stride n * 24
            return torch.bmm(h, self.w.expand(2, 24, 24))
        if self.use == "and_output":
            return h @ self.w, h
        if self.use == "and_pointwise":
            return h @ self.w + h.exp()
        if self.use == "transposed":  # h.T @ w: a's rows are h's columns
            return h.transpose(-2, -1) @ self.w[:5]
        if self.use == "as_b":
            return self.w[:5, :5] @ h
        raise ValueError(self.use)


def _lowered(use: str, model: nn.Module | None = None):
    x = torch.randn(2, 5, 24) if use == "batched" else torch.randn(5, 24)
    axes = {"x": {1: "n"}} if use == "batched" else ({} if use in ("transposed", "as_b") else {"x": {0: "n"}})
    model = model if model is not None else Norm(use).eval()
    spec = ModelSpec(HERE / "model.py", model, (x,), ("x",), axes, {"n": (1, 64)} if axes else {})
    plan = resolve_symbols(spec)
    program = stages.lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))
    verify_program(program, "test")
    return program


@pytest.mark.parametrize("use", ["product", "batched"])
def test_a_norm_only_products_read_moves_into_them(use):
    (step,) = _lowered(use).steps
    assert step.family == "matmul" and [r.op for r in step.a_reductions] == ["sum", "sum"]


@pytest.mark.parametrize("use", ["and_output", "and_pointwise", "transposed", "as_b"])
def test_a_norm_read_otherwise_stays_a_row_kernel(use):
    program = _lowered(use)
    assert not any(getattr(s, "a_reductions", ()) for s in program.steps)
    assert {"row", "reduction"} & {s.family for s in program.steps}  # the norm is computed, and stored


BATCHED = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from test_row_prologue import Norm, _lowered
from aotpack.lowering.backends.cuda.render import render_triton_library
torch.manual_seed(0)
model = Norm("batched").eval()
with torch.no_grad():
    model.norm.weight.uniform_(0.5, 1.5)
    model.norm.bias.uniform_(-0.5, 0.5)
program = _lowered("batched", model)
library = render_triton_library(program)
report = {}
for n in (1, 37, 64):
    x = torch.randn(2, n, 24) * 3 + 1
    outs, errors = run_program(program, library, [x])
    with torch.no_grad():
        report[n] = (errors, (outs[0] - model(x)).abs().max().item())
print(json.dumps(report))
"""


def test_a_batched_products_moved_norm_matches_eager_in_the_triton_interpreter():
    report = run_in_interpreter(BATCHED)
    assert all(not errors and err < 1e-4 for errors, err in report.values()), report
