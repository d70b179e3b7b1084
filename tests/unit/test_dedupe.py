"""Identical kernels computed once (lowering/ir/dedupe.py)."""

from __future__ import annotations

from pathlib import Path

import sympy
import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.lowering.ir.dedupe import dedupe_kernels
from aotpack.lowering.ir.kernels import Buffer, PointwiseKernel, Program, ReductionKernel, Symbol
from aotpack.lowering.ir.scalar import Load, Op
from aotpack.lowering.ir.symbolic import index_var, size_symbol
from torch import nn

HERE = Path(__file__).resolve().parent


class Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc(self.norm(x))


def test_layer_norm_sums_each_row_once():
    model = Norm().eval()
    spec = ModelSpec(HERE / "model.py", model, (torch.randn(4, 32),), ("x",), {"x": {0: "n"}}, {"n": (1, 16)})
    plan = resolve_symbols(spec)
    program = GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run()
    deduped = dedupe_kernels(program)
    reductions = [s for s in program.steps if isinstance(s, ReductionKernel)]
    assert len(reductions) == 3, reductions  # sum for the variance's mean, the variance, sum for the mean again
    assert len([s for s in deduped.steps if isinstance(s, ReductionKernel)]) == 2
    assert len(deduped.buffers) == len(program.buffers) - 1
    written = {s.output for s in deduped.steps} | set(deduped.inputs) | {
        b for b, buf in deduped.buffers.items() if buf.kind == "weight"}
    assert all(set(s.reads()) <= written for s in deduped.steps)


def test_a_recomputation_after_its_input_changed_is_kept():
    """x is rewritten between the two sums (a scatter or a second writer): the second sum reads new data."""
    n, i0, r0 = size_symbol("n"), index_var("i", 0), index_var("r", 0)
    total = ReductionKernel("s1", (sympy.Integer(1),), (n,), Load("x", r0, "float32"), "sum", "float32", "float32")
    again = ReductionKernel("s2", (sympy.Integer(1),), (n,), Load("x", r0, "float32"), "sum", "float32", "float32")
    rewrite = PointwiseKernel("x", (n,), Op("neg", (Load("y", i0, "float32"),), "float32"))
    out = PointwiseKernel("out", (sympy.Integer(1),), Op("add", (Load("s1", i0, "float32"), Load("s2", i0, "float32")),
                                                          "float32"))
    bufs = [Buffer("y", "float32", (n,), "input", "y"), Buffer("x", "float32", (n,), "arena"),
            Buffer("s1", "float32", (1,), "arena"), Buffer("s2", "float32", (1,), "arena"),
            Buffer("out", "float32", (1,), "output", "out")]
    first = PointwiseKernel("x", (n,), Load("y", i0, "float32"))
    program = Program((Symbol("n", 1, 8),), {b.name: b for b in bufs}, (first, total, rewrite, again, out), ("y",),
                      ("out",))
    assert dedupe_kernels(program).steps == program.steps
    # without the rewrite in between, the second sum goes
    plain = Program(program.symbols, program.buffers, (first, total, again, out), ("y",), ("out",))
    deduped = dedupe_kernels(plain)
    assert len(deduped.steps) == 3 and "s2" not in deduped.buffers
    assert deduped.steps[-1].reads() == ("s1",)
