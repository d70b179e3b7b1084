"""Sibling products (lowering/ir/sibling_products.py): consecutive products of one operand with their own
weights become one product over the weights side by side; what is merged and what is not, and that the
merged program computes what eager does (Triton's interpreter; the CPU kernels are checked against eager
by every e2e test, which run with the merge on: examples/llama among them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.lowering.ir.kernels import MatmulKernel
from aotpack.lowering.ir.sibling_products import merge_sibling_products
from torch import nn

HERE = Path(__file__).resolve().parent


class Projections(nn.Module):
    """Three bias-free projections of one input, of different widths (Llama's q, k, v with grouped kv), each
    read transposed, q also through two slices: no reader reads a product at its own element, so none of them
    would take an epilogue."""

    def __init__(self, tied: bool = False, bias: bool = False):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(32, 32, bias=bias), nn.Linear(32, 16, bias=bias), nn.Linear(32, 16, bias=bias)
        if tied:
            self.out = nn.Linear(32, 32, bias=False)
            self.out.weight = self.q.weight  # read by another product too: never merged
        self.tied = tied

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        mixed = q[..., :16].transpose(0, 1) * torch.sigmoid(k).transpose(0, 1) + v.transpose(0, 1)
        if self.tied:
            y = mixed.transpose(0, 1)
            return self.out(torch.cat([y, y], -1))
        return mixed * q[..., 16:].transpose(0, 1)


def lowered(model: nn.Module, x: torch.Tensor):
    spec = ModelSpec(HERE / "model.py", model.eval(), (x,), ("x",), {"x": {0: "n"}}, {"n": (1, 64)})
    plan = resolve_symbols(spec)
    return GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run()


def products(program):
    return [s for s in program.steps if isinstance(s, MatmulKernel)]


def test_three_projections_of_one_input_become_one_product_over_their_weights_side_by_side():
    torch.manual_seed(0)
    program = lowered(Projections(), torch.randn(5, 32))
    merged = merge_sibling_products(program)
    assert len(products(program)) == 3 and len(products(merged)) == 1, products(merged)
    (product,) = products(merged)
    assert int(product.n) == 64
    weight = merged.buffers[product.b.buffer]
    assert weight.kind == "weight" and tuple(int(d) for d in weight.shape) == (64, 32)  # [n, k], as nn.Linear's
    # the merged weight holds q's, k's and v's rows in order; the originals are gone from the package
    expected = torch.cat([program.weights[program.buffers[p.b.buffer].source] for p in products(program)])
    assert torch.equal(merged.weights[weight.source], expected)
    assert not any(program.buffers[p.b.buffer].source in merged.weights for p in products(program))


def test_a_weight_that_another_product_reads_stays_apart_and_its_siblings_merge():
    torch.manual_seed(0)
    program = lowered(Projections(tied=True), torch.randn(5, 32))
    merged = merge_sibling_products(program)
    q_weight = program.buffers[products(program)[0].b.buffer]
    assert [int(p.n) for p in products(merged)] == [32, 32, 32], products(merged)  # q alone, k + v, out
    assert products(merged)[0].b.buffer == q_weight.name and q_weight.source in merged.weights


def test_products_whose_readers_add_biases_stay_apart():
    torch.manual_seed(0)
    program = lowered(Projections(bias=True), torch.randn(5, 32))
    assert merge_sibling_products(program).steps == program.steps


class GatedMlp(nn.Module):
    """Llama's MLP: the up projection's reader multiplies it by the activated gate at its own element."""

    def __init__(self):
        super().__init__()
        self.gate, self.up = nn.Linear(32, 64, bias=False), nn.Linear(32, 64, bias=False)

    def forward(self, x):
        return nn.functional.silu(self.gate(x)) * self.up(x)


def test_products_of_which_one_takes_its_reader_as_an_epilogue_stay_apart():
    torch.manual_seed(0)
    program = lowered(GatedMlp(), torch.randn(5, 32))
    assert merge_sibling_products(program).steps == program.steps


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from test_sibling_products import Projections, lowered
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.lowering.ir.sibling_products import merge_sibling_products
torch.manual_seed(0)
model = Projections().to(torch.float16)  # the interpreter has no bfloat16 (numpy)
merged = merge_sibling_products(lowered(model, torch.randn(5, 32, dtype=torch.float16)))
report = {}
for n in (1, 7, 40):
    x = torch.randn(n, 32, dtype=torch.float16)
    out, _ = run_program(merged, render_triton_library(merged), [x])
    with torch.no_grad():
        eager = model.float()(x.float())
        model.half()
    report[n] = float((out[0].float() - eager).abs().max() / eager.abs().max())
print(json.dumps(report))
"""


def test_the_merged_program_computes_what_eager_does_in_the_triton_interpreter():
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", RUN, str(HERE.parent / "codegen"), str(HERE)], check=False,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(report) == 3
    for n, err in report.items():
        assert err < 5e-3, f"n={n}: relative error {err} from eager float32"
