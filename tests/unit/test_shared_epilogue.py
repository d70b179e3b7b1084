"""Epilogues the product's readers share (lowering/ir/epilogue.py `fuse_shared_epilogues`) and copies read as
views (lowering/ir/copy_elision.py): which programs change, and that the changed program computes exactly what
the unchanged one did (Triton's interpreter; the CPU kernels are checked against eager by every e2e test)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.lowering.ir.copy_elision import elide_copies
from aotpack.lowering.ir.epilogue import fuse_epilogues, fuse_shared_epilogues
from aotpack.lowering.ir.kernels import AttentionKernel, MatmulKernel, PointwiseKernel
from interpreter import run_in_interpreter  # tests/unit/interpreter.py
from torch import nn
from torch.nn import functional as F

HERE = Path(__file__).resolve().parent


class FusedQkv(nn.Module):
    """GPT-2's attention: one product for q, k and v with one bias, split in three, each permuted to heads."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class SeparateQkv(FusedQkv):
    """BERT's attention: three products, each with its bias, each permuted to heads by its only reader."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__(dim, heads)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (p(x).view(b, s, self.heads, d // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class RowBias(nn.Module):
    """The product's reader adds a value per row of the product (not per column) while transposing it: its
    work is not a column epilogue, so nothing changes."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 8))

    def forward(self, x, r):
        return (x @ self.w).transpose(0, 1) + r


def lowered(model: nn.Module, *args: torch.Tensor):
    names = ("x", "r")[:len(args)]  # the forward's argument names
    dynamic = args[0].dim() == 3  # the attention models: seq dynamic
    axes = {"x": {1: "s"}} if dynamic else {name: {} for name in names}
    spec = ModelSpec(HERE / "model.py", model.eval(), args, names, axes, {"s": (1, 64)} if dynamic else {})
    plan = resolve_symbols(spec)
    return GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run()


def passes(program):
    return elide_copies(fuse_shared_epilogues(fuse_epilogues(program)))


@pytest.mark.parametrize("model", [FusedQkv, SeparateQkv])
def test_bias_goes_into_the_product_and_attention_reads_the_product_through_views(model):
    torch.manual_seed(0)
    program = lowered(model(), torch.randn(2, 5, 32))
    after = passes(program)
    attention = next(s for s in after.steps if isinstance(s, AttentionKernel))
    products = {s.output: s for s in after.steps if isinstance(s, MatmulKernel)}
    for name in ("q", "k", "v"):
        view = getattr(attention, name)
        assert view.buffer in products, f"{name} reads {view.buffer}, not a product"
        assert products[view.buffer].epilogue is not None, f"{name}'s bias is not in its product's epilogue"
    assert not any(isinstance(s, PointwiseKernel) for s in after.steps), after.steps  # every copy is gone
    copies = sum(isinstance(s, PointwiseKernel) for s in fuse_epilogues(program).steps)
    assert copies == 3 and len(after.steps) == len(fuse_epilogues(program).steps) - 3


def test_a_reader_adding_a_value_per_row_keeps_its_kernel():
    program = lowered(RowBias(), torch.randn(4, 16), torch.randn(8, 4))
    assert passes(program).steps == fuse_epilogues(program).steps


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from test_shared_epilogue import FusedQkv, SeparateQkv, lowered, passes
from aotpack.lowering.backends.cuda.render import render_triton_library
torch.manual_seed(0)
report = {}
for cls in (FusedQkv, SeparateQkv):
    model = cls().to(torch.float16)  # the interpreter has no bfloat16 (numpy)
    program = lowered(model, torch.randn(2, 5, 32, dtype=torch.float16))
    after = passes(program)
    for s in (1, 9, 33):
        x = torch.randn(2, s, 32, dtype=torch.float16)
        plain, _ = run_program(program, render_triton_library(program), [x])
        changed, _ = run_program(after, render_triton_library(after), [x])
        with torch.no_grad():
            eager = model(x)
        report[f"{cls.__name__} {s}"] = [bool(torch.equal(plain[0], changed[0])),
                                         float((changed[0].float() - eager.float()).abs().max())]
print(json.dumps(report))
"""


def test_changed_and_unchanged_programs_agree_bit_for_bit_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert len(report) == 6
    for point, (equal, err) in report.items():
        assert equal, f"{point}: the changed program differs from the unchanged one"
        assert err < 2e-2, f"{point}: {err} from eager fp16"
