"""Row kernels (lowering/ir/row_fusion.py): which reductions fuse with their pointwise consumer, which must not,
and that a fused program computes exactly what the unfused one did (Triton's interpreter here; the C++ kernels
in tests/e2e/test_row_kernels.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import sympy
import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.lowering.ir.dedupe import dedupe_kernels
from aotpack.lowering.ir.kernels import (
    Buffer,
    PointwiseKernel,
    Program,
    ReductionKernel,
    ScatterKernel,
    Symbol,
)
from aotpack.lowering.ir.row_fusion import ROW_CAP, fuse_rows
from aotpack.lowering.ir.scalar import Load, Op
from aotpack.lowering.ir.symbolic import index_var, size_symbol
from aotpack.lowering.ir.verify import IRError, verify_program
from interpreter import run_in_interpreter  # tests/unit/interpreter.py
from torch import nn

HERE = Path(__file__).resolve().parent


class ResidualLayerNorm(nn.Module):
    """GPT-2's pattern: a residual sum, then layer norm (mean, variance, normalise) over rows of 16."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x, y):
        return self.norm(x + y)


class RmsNorm(nn.Module):
    """Llama's: one reduction (the mean square) and the scaling pass."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 16))

    def forward(self, x, y):
        h = (x + y).float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight).to(x.dtype)


class Softmax(nn.Module):
    """A softmax outside attention: max, sum of exponentials, division."""

    def forward(self, x, y):
        return (x * y).softmax(-1)


class ScoreSoftmax(nn.Module):
    """A softmax over rows whose length is a symbol (n x n scores): bounded by the declared range, so fused."""

    def forward(self, x, y):
        return (x @ y.T).softmax(-1)


class BlockCentre(nn.Module):
    """Reductions over two dimensions (each row a 4 x 4 block): the row kernel's nested loops and masks."""

    def forward(self, x, y):
        x = x.view(-1, 4, 4)
        return (x - x.mean((-2, -1), keepdim=True)) * x.amax((-2, -1), keepdim=True) + y.view(-1, 4, 4)


class SharedSum(nn.Module):
    """The row sums are read by two consumers, one of which is not over whole rows: they stay stored."""

    def forward(self, x, y):
        m = x.sum(-1, keepdim=True)
        return x - m, m * y[:, :1]


class OtherRow(nn.Module):
    """Each row reads another row's sum (flipped): not at its own row, so not fused."""

    def forward(self, x, y):
        return x - x.sum(-1, keepdim=True).flip(0) + y


def lowered(model: nn.Module, width: int = 16, dtype: torch.dtype = torch.float32) -> Program:
    """The model's kernels as `lower` makes them before row fusion (lowered, repeated kernels dropped)."""
    x, y = torch.randn(5, width, dtype=dtype), torch.randn(5, width, dtype=dtype)
    spec = ModelSpec(HERE / "model.py", model.eval(), (x, y), ("x", "y"), {"x": {0: "n"}, "y": {0: "n"}},
                     {"n": (1, 64)})
    plan = resolve_symbols(spec)
    return dedupe_kernels(GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run())


def families(program: Program) -> list[str]:
    return [s.family for s in program.steps]


@pytest.mark.parametrize("model, ops", [(ResidualLayerNorm(), ["sum", "sum"]), (RmsNorm(), ["sum"]),
                                        (Softmax(), ["max", "sum"]), (ScoreSoftmax(), ["max", "sum"]),
                                        (BlockCentre(), ["sum", "max"])])
def test_row_reductions_and_their_consumer_become_one_row_kernel(model, ops):
    program = lowered(model)
    fused = fuse_rows(program)
    assert "reduction" in families(program)
    assert families(fused)[-1:] == ["row"] and "reduction" not in families(fused), families(fused)
    row = fused.steps[-1]
    assert [r.op for r in row.reductions] == ops
    assert row.output == program.steps[-1].output and row.reduced == next(s.reduced for s in program.steps if s.family == "reduction")
    # the reductions' results and the pointwise parts between them (softmax's exponentials) are not stored
    gone = set(program.buffers) - set(fused.buffers)
    assert gone == {s.output for s in program.steps[:-1] if s.family != "matmul"}, gone
    assert set(row.reads()) <= set(fused.buffers)


def test_a_reduction_another_step_reads_stays_a_step():
    program = lowered(SharedSum())
    assert fuse_rows(program).steps == program.steps


def test_a_consumer_reading_another_rows_result_is_not_fused():
    program = lowered(OtherRow())
    assert "reduction" in families(program)
    assert fuse_rows(program).steps == program.steps


def test_rows_longer_than_the_cap_keep_their_looped_kernels():
    program = lowered(Softmax(), width=ROW_CAP + 1)
    assert fuse_rows(program).steps == program.steps
    assert families(fuse_rows(lowered(Softmax(), width=ROW_CAP))) == ["row"]


n = size_symbol("n")
i0, i1, r0, u0 = index_var("i", 0), index_var("i", 1), index_var("r", 0), index_var("u", 0)
EIGHT = sympy.Integer(8)


def _centred(between: list) -> Program:
    """a = x; s = sum of a's rows; <between>; out = a - s: row fusion moves the sum down to `out`."""
    buffers = {"x": Buffer("x", "float32", (n, EIGHT), "input", "x"), "a": Buffer("a", "float32", (n, EIGHT), "arena"),
               "s": Buffer("s", "float32", (n,), "arena"), "out": Buffer("out", "float32", (n, EIGHT), "output", "out")}
    steps = [PointwiseKernel("a", (n, EIGHT), Load("x", 8 * i0 + i1, "float32")),
             ReductionKernel("s", (n,), (EIGHT,), Load("a", 8 * i0 + r0, "float32"), "sum", "float32", "float32"),
             *between,
             PointwiseKernel("out", (n, EIGHT), Op("sub", (Load("a", 8 * i0 + i1, "float32"),
                                                           Load("s", i0, "float32")), "float32"))]
    return Program((Symbol("n", 1, 64),), buffers, tuple(steps), ("x",), ("out",))


def test_a_reduction_does_not_move_past_a_step_that_writes_what_it_reads():
    fused = fuse_rows(_centred([]))
    assert families(fused) == ["row"] and not {"a", "s"} & set(fused.buffers)  # the copy is inlined too
    # a scatter updates `a` between the sum and its consumer: the sum must see `a` before the update
    update = ScatterKernel("a", (n,), Load("a", 8 * u0, "float32"), Load("x", 8 * u0 + 1, "float32"), "sum")
    program = _centred([update])
    assert fuse_rows(program).steps == program.steps


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from test_row_fusion import BlockCentre, ResidualLayerNorm, RmsNorm, ScoreSoftmax, Softmax, lowered
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.lowering.ir.row_fusion import fuse_rows
torch.manual_seed(0)
report = {}
# the interpreter computes bfloat16 wrongly (numpy has none): float16 and float32
for name, model, dtype in (("layer_norm", ResidualLayerNorm(), torch.float16), ("rms_norm", RmsNorm(), torch.float16),
                           ("softmax", Softmax(), torch.float32), ("scores", ScoreSoftmax(), torch.float16),
                           ("blocks", BlockCentre(), torch.float32)):
    model = model.to(dtype)
    program = lowered(model, dtype=dtype)
    fused = fuse_rows(program)
    assert [s.family for s in fused.steps][-1:] == ["row"] and len(fused.steps) <= 2, fused.steps
    for n in (1, 7, 40):
        x, y = torch.randn(n, 16, dtype=dtype) * 3, torch.randn(n, 16, dtype=dtype)
        plain, _ = run_program(program, render_triton_library(program), [x, y])
        once, errors = run_program(fused, render_triton_library(fused), [x, y])
        with torch.no_grad():
            eager = model(x, y)
        report[f"{name} n={n}"] = [bool(torch.equal(plain[0], once[0])), float((once[0].float() - eager.float()).abs().max()),
                                   errors]
print(json.dumps(report))
"""


def test_fused_and_unfused_programs_agree_bit_for_bit_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert len(report) == 15, report
    for case, (equal, err, errors) in report.items():
        assert equal, f"{case}: fused and unfused differ"
        assert err < 1e-2 and not errors, f"{case}: {err} from eager, errors {errors}"


def test_the_verifier_refuses_a_part_reading_a_result_not_yet_computed():
    (row,) = fuse_rows(lowered(ResidualLayerNorm())).steps
    mean, var = row.reductions
    swapped = replace(row, reductions=(var, mean))  # the variance would read the mean before it exists
    program = fuse_rows(lowered(ResidualLayerNorm()))
    verify_program(program, "test")
    with pytest.raises(IRError, match=r"step 0 \(row\) part 0 reads @row:"):
        verify_program(replace(program, steps=(swapped,)), "test")
