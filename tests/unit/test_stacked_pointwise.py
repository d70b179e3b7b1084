"""Stacked pointwise steps (lowering/ir/stacked_pointwise.py): a rotary embedding's q and k rotations, the same
expression over adjacent heads of one q|k|v product, become one step whose readers read their heads through
views; steps whose expressions differ stay apart; the stacked program computes what eager does (Triton's
interpreter here; the CPU kernels are checked against eager by every e2e test, examples/llama among them)."""

from __future__ import annotations

from pathlib import Path

import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.ir.kernels import AttentionKernel, MatmulKernel, PointwiseKernel
from aotpack.lowering.ir.stacked_pointwise import stack_pointwise
from aotpack.lowering.stages import lower
from interpreter import run_in_interpreter  # tests/unit/interpreter.py
from torch import nn
from torch.nn import functional as F

HERE = Path(__file__).resolve().parent


def rotate_half(t: torch.Tensor) -> torch.Tensor:
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), -1)


class Rotary(nn.Module):
    """Causal attention of 4 query heads over `kv` key/value heads with a rotary embedding, as transformers'
    Llama computes it (cos and sin from the positions, q and k each rotated). With `differ`, k is rotated the
    other way, so the two rotations are not one expression."""

    def __init__(self, kv: int = 2, differ: bool = False):
        super().__init__()
        self.kv, self.differ = kv, differ
        self.q, self.k, self.v = (nn.Linear(32, 8 * h, bias=False) for h in (4, kv, kv))
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)), persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 4, 8).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, 8).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, 8).transpose(1, 2)
        freqs = torch.arange(s, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos().to(x.dtype)[None, None], emb.sin().to(x.dtype)[None, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos - rotate_half(k) * sin if self.differ else k * cos + rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != 4)
        return out.transpose(1, 2).reshape(b, s, 32)


def lowered(model: nn.Module, dtype=torch.float32):
    x = torch.randn(2, 5, 32, dtype=dtype)
    spec = ModelSpec(HERE / "model.py", model.eval().to(dtype), (x,), ("x",), {"x": {0: "b", 1: "s"}},
                     {"b": (1, 4), "s": (1, 64)})
    plan = resolve_symbols(spec)
    return lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))


def pointwise(program) -> list[PointwiseKernel]:
    return [s for s in program.steps if isinstance(s, PointwiseKernel)]


def test_the_rotations_of_q_and_k_are_one_step_read_through_views():
    torch.manual_seed(0)
    program = lowered(Rotary(kv=2))
    (rotation,) = pointwise(program)
    assert rotation.output.endswith(".stacked") and int(rotation.shape[1]) == 4 + 2  # q's heads, then k's
    attention = next(s for s in program.steps if isinstance(s, AttentionKernel))
    assert attention.q.buffer == attention.k.buffer == rotation.output
    assert attention.q.offset == 0 and attention.k.offset != 0  # k's heads start after q's
    assert attention.q.strides == attention.k.strides


def test_one_kv_head_stacks_too():
    # k one head wide reads its rotated half at the index the inverse frequencies are read at: they are no bias
    # of k (ir/sibling_products.py), so q, k and v are one product and the rotations stack
    torch.manual_seed(0)
    program = lowered(Rotary(kv=1))
    assert sum(isinstance(s, MatmulKernel) for s in program.steps) == 1
    (rotation,) = pointwise(program)
    assert int(rotation.shape[1]) == 4 + 1


def test_rotations_that_differ_stay_two_steps():
    torch.manual_seed(0)
    program = lowered(Rotary(kv=2, differ=True))
    assert len(pointwise(program)) == 2
    assert not any(s.output.endswith(".stacked") for s in program.steps)
    assert stack_pointwise(program) == program


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from test_stacked_pointwise import Rotary, lowered, pointwise
from aotpack.lowering.backends.cuda.render import render_triton_library
torch.manual_seed(0)
report = {}
for kv in (1, 2, 4):
    model = Rotary(kv=kv).to(torch.float16)  # the interpreter has no bfloat16 (numpy)
    program = lowered(model, torch.float16)
    assert len(pointwise(program)) == 1, kv
    for b, s in ((1, 1), (2, 7), (3, 40)):
        x = torch.randn(b, s, 32, dtype=torch.float16)
        outs, _ = run_program(program, render_triton_library(program), [x])
        with torch.no_grad():
            eager = model.float()(x.float())
            model.half()
        report[f"kv={kv} b={b} s={s}"] = float((outs[0].float() - eager).abs().max() / eager.abs().max())
print(json.dumps(report))
"""


def test_the_stacked_program_computes_what_eager_does_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert len(report) == 9
    for point, err in report.items():
        assert err < 5e-3, f"{point}: relative error {err} from eager float32"
