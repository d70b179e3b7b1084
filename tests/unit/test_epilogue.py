"""Matrix-product epilogues (lowering/ir/epilogue.py): which consumers fuse into their product, and that a
fused program computes exactly what the unfused one did (Triton's interpreter; the CPU kernels are checked
against eager by every e2e test, which all run with fusion on)."""

from __future__ import annotations

from pathlib import Path

import sympy
import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.lowering.ir import scalar
from aotpack.lowering.ir.epilogue import fuse_epilogues
from aotpack.lowering.ir.kernels import ACC, MatmulKernel, epilogue_vars
from interpreter import run_in_interpreter  # tests/unit/interpreter.py
from torch import nn

HERE = Path(__file__).resolve().parent


class Mlp(nn.Module):
    """Linear + bias + GELU, Linear + bias + residual: two epilogues; the last product feeds two consumers."""

    def __init__(self):
        super().__init__()
        self.up, self.down, self.head = nn.Linear(16, 64), nn.Linear(64, 16), nn.Linear(16, 8)

    def forward(self, x):
        h = x + self.down(nn.functional.gelu(self.up(x)))
        y = self.head(h)
        return y.softmax(-1), y.sum(-1)


class Transposed(nn.Module):
    """The product's consumer reads it transposed: not element by element, so not fused."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        return torch.relu((x @ self.w).transpose(0, 1)) * 2


def lowered(model: nn.Module, x: torch.Tensor, dims: dict[int, str] | None = None):
    dims = dims or {0: "n"}
    spec = ModelSpec(HERE / "model.py", model.eval(), (x,), ("x",), {"x": dims}, {name: (1, 64) for name in dims.values()})
    plan = resolve_symbols(spec)
    return GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run()


def test_bias_activation_and_residual_fuse_into_their_products():
    torch.manual_seed(0)
    program = lowered(Mlp(), torch.randn(5, 16))
    fused = fuse_epilogues(program)
    products = [s for s in fused.steps if isinstance(s, MatmulKernel)]
    assert [s.epilogue is not None for s in products] == [True, True, False], products
    assert len(fused.steps) == len(program.steps) - 2
    assert len(fused.buffers) == len(program.buffers) - 2  # the two products' outputs are never stored
    # the epilogue reads the bias (and the residual) itself
    assert len(products[0].reads()) == 3 and len(products[1].reads()) == 4, [p.reads() for p in products]


def test_a_residual_over_batch_and_seq_is_read_at_the_products_row():
    """x is [batch, seq, 16]: the products' rows are batch * seq, and the residual add reads x at the row split
    back into (row // seq, row % seq). Folded (fold_div_mod), the epilogue reads it at row * 16 + column, with
    no division or modulo per row left in the kernel."""
    from torch.utils._sympy.functions import FloorDiv, ModularIndexing

    torch.manual_seed(0)
    fused = fuse_epilogues(lowered(Mlp(), torch.randn(2, 5, 16), {0: "batch", 1: "seq"}))
    down = [s for s in fused.steps if isinstance(s, MatmulKernel)][1]
    _, row, column = epilogue_vars()
    residual = [load for load in scalar.loads(down.epilogue) if load.buffer != ACC and load.index.free_symbols & {row}]
    assert [load.index for load in residual] == [16 * row + column], residual
    for load in scalar.loads(down.epilogue):
        assert not any(isinstance(e, (FloorDiv, ModularIndexing)) for e in sympy.preorder_traversal(load.index))


def test_a_consumer_reading_the_product_transposed_is_not_fused():
    program = lowered(Transposed(), torch.randn(16, 16))
    fused = fuse_epilogues(program)
    assert fused.steps == program.steps


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from test_epilogue import Mlp, lowered
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.lowering.ir.epilogue import fuse_epilogues
torch.manual_seed(0)
model = Mlp().to(torch.float16)  # the interpreter has no bfloat16 (numpy)
program = lowered(model, torch.randn(5, 16, dtype=torch.float16))
fused = fuse_epilogues(program)
report = {}
for n in (1, 7, 40):
    x = torch.randn(n, 16, dtype=torch.float16)
    plain, _ = run_program(program, render_triton_library(program), [x])
    once, _ = run_program(fused, render_triton_library(fused), [x])
    with torch.no_grad():
        eager = model(x)
    report[n] = [bool(torch.equal(a, b)) for a, b in zip(plain, once)] + [
        float((once[0].float() - eager[0].float()).abs().max())]
print(json.dumps(report))
"""


def test_fused_and_unfused_programs_agree_bit_for_bit_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    for n, (softmax_equal, sum_equal, err) in report.items():
        assert softmax_equal and sum_equal, f"n={n}: fused and unfused differ"
        assert err < 2e-2, f"n={n}: {err} from eager fp16"
