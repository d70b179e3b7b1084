"""Sibling products (lowering/ir/sibling_products.py): consecutive products of one operand with their own
weights become one product over the weights side by side; what is merged and what is not, and that the
merged program computes what eager does (Triton's interpreter; the CPU kernels are checked against eager
by every e2e test, which run with the merge on: examples/llama among them)."""

from __future__ import annotations

from pathlib import Path

import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.lowering.ir.kernels import MatmulKernel
from aotpack.lowering.ir.sibling_products import merge_sibling_products
from interpreter import run_in_interpreter  # tests/unit/interpreter.py
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


class BiasedHeads(nn.Module):
    """BERT's q, k and v: each projection's bias added by its own reader while it permutes it."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 16), nn.Linear(32, 16)

    def forward(self, x):
        return tuple(p(x).view(x.shape[0], 2, -1).transpose(0, 1) for p in (self.q, self.k, self.v))


def test_biases_added_by_the_readers_are_concatenated_as_the_weights_are():
    torch.manual_seed(0)
    model = BiasedHeads()
    program = lowered(model, torch.randn(5, 32))
    merged = merge_sibling_products(program)
    assert len(products(merged)) == 1, products(merged)
    bias = next(b for b in merged.buffers.values() if b.kind == "weight" and len(b.shape) == 1)
    assert torch.equal(merged.weights[bias.source], torch.cat([model.q.bias, model.k.bias, model.v.bias]).detach())
    assert not any(b.kind == "weight" and b.source in ("q.bias", "k.bias", "v.bias") for b in merged.buffers.values())


class PartlyBiased(BiasedHeads):
    """Only q has a bias: q stays apart (its bias goes into its own product's epilogue); k and v merge."""

    def __init__(self):
        super().__init__()
        self.k, self.v = nn.Linear(32, 16, bias=False), nn.Linear(32, 16, bias=False)


def test_a_reader_adding_several_products_biases_keeps_them_apart():
    """One reader adds q's, k's and v's biases: which bias belongs to which product is not told by the columns
    alone (k's and v's are read at the same column), so nothing merges."""
    torch.manual_seed(0)
    program = lowered(Projections(bias=True), torch.randn(5, 32))
    assert merge_sibling_products(program).steps == program.steps


def test_a_product_with_a_bias_stays_apart_from_siblings_without():
    torch.manual_seed(0)
    program = lowered(PartlyBiased(), torch.randn(5, 32))
    assert [int(p.n) for p in products(merge_sibling_products(program))] == [32, 32]


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
from test_sibling_products import BiasedHeads, Projections, lowered
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.lowering.ir.epilogue import fuse_epilogues, fuse_shared_epilogues
from aotpack.lowering.ir.sibling_products import merge_sibling_products
torch.manual_seed(0)
report = {}
for cls in (Projections, BiasedHeads):
    model = cls().to(torch.float16)  # the interpreter has no bfloat16 (numpy)
    program = lowered(model, torch.randn(5, 32, dtype=torch.float16))
    merged = fuse_shared_epilogues(fuse_epilogues(merge_sibling_products(program)))
    assert len(merged.steps) < len(program.steps), cls
    for n in (1, 7, 40):
        x = torch.randn(n, 32, dtype=torch.float16)
        outs, _ = run_program(merged, render_triton_library(merged), [x])
        with torch.no_grad():
            eager = model.float()(x.float())
            model.half()
        eager = eager if isinstance(eager, tuple) else (eager,)
        report[f"{cls.__name__} n={n}"] = max(float((o.float() - e).abs().max() / e.abs().max())
                                               for o, e in zip(outs, eager))
print(json.dumps(report))
"""


def test_the_merged_program_computes_what_eager_does_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert len(report) == 6
    for n, err in report.items():
        assert err < 5e-3, f"n={n}: relative error {err} from eager float32"
