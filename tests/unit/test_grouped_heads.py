"""Grouped-query attention through repeated heads (lowering/frontend/ops/attention.py `grouped_heads`): key and
value that repeat each kv head (transformers' repeat_kv) reach the attention kernel over their kv heads, so the
repetition is never stored; heads that differ stay as they are. Results against eager: every e2e test of the
Llama example (tests/e2e/test_hf_models.py, sdpa and eager attention) runs with this."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.lowering.ir.kernels import AttentionKernel, PointwiseKernel
from torch import nn
from torch.nn import functional as F

HERE = Path(__file__).resolve().parent


def repeat_kv(t: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, kvh, s, d = t.shape
    return t[:, :, None, :, :].expand(b, kvh, n_rep, s, d).reshape(b, kvh * n_rep, s, d)


class Gqa(nn.Module):
    """8 query heads over `kv` key/value heads, k scaled per kv head (a stand-in for rotary embedding)."""

    def __init__(self, kv: int, repeat: bool = True):
        super().__init__()
        self.kv, self.repeat = kv, repeat
        self.q, self.k, self.v = nn.Linear(32, 32, bias=False), nn.Linear(32, 4 * kv, bias=False), \
            nn.Linear(32, 4 * kv, bias=False)
        self.k_scale = nn.Parameter(torch.rand(kv, 1, 1) + 0.5)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 8, 4).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, 4).transpose(1, 2) * self.k_scale
        v = self.v(x).view(b, s, self.kv, 4).transpose(1, 2)
        if self.repeat:
            k, v = repeat_kv(k, 8 // self.kv), repeat_kv(v, 8 // self.kv)
        else:  # every head its own: k differs per query head
            k, v = k.repeat(1, 8 // self.kv, 1, 1) * torch.arange(1, 9).view(1, 8, 1, 1), v.repeat(1, 8 // self.kv, 1, 1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, 32)


def attention_of(model: nn.Module) -> tuple[AttentionKernel, list]:
    spec = ModelSpec(HERE / "model.py", model.eval(), (torch.randn(2, 5, 32),), ("x",), {"x": {1: "s"}}, {"s": (1, 64)})
    plan = resolve_symbols(spec)
    program = GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run()
    return next(s for s in program.steps if isinstance(s, AttentionKernel)), list(program.steps)


@pytest.mark.parametrize("kv", [1, 2, 4])
def test_repeated_kv_heads_reach_attention_as_kv_heads(kv):
    torch.manual_seed(0)
    attention, steps = attention_of(Gqa(kv))
    assert (int(attention.heads), int(attention.kv_heads)) == (8, kv), attention
    # v is the product itself, read through a view; k's scaling is computed once per kv head
    scaled = [s for s in steps if isinstance(s, PointwiseKernel) and s.output == attention.k.buffer]
    assert len(scaled) == 1 and int(scaled[0].shape[1]) == kv, scaled
    assert not any(isinstance(s, PointwiseKernel) and s.output == attention.v.buffer for s in steps)


def test_heads_that_differ_stay_heads():
    torch.manual_seed(0)
    attention, _ = attention_of(Gqa(2, repeat=False))
    assert (int(attention.heads), int(attention.kv_heads)) == (8, 8), attention


@pytest.mark.parametrize("kv", [1, 2])
def test_a_grouped_query_model_exports_and_verifies_against_eager(tmp_path, kv):
    """Through the public API with verification on (the CPU kernel reads kv head h // group)."""
    import aotpack

    torch.manual_seed(0)
    result = aotpack.export(Gqa(kv).eval(), (torch.randn(2, 5, 32),), tmp_path / "gqa.aotpack",
                            dynamic_shapes={"x": {1: torch.export.Dim("seq", min=1, max=64)}})
    assert result.verification["passed"] and result.verification["points"], result.verification
