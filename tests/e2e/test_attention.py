"""The fused attention kernel (lowering/frontend/ops/attention.py) against eager sdpa, through the C++ runtime.

Cases cross the kernel's block edges (96 query rows and 64 keys per block on CPU), sizes 1, masks of every
broadcast shape, rows with every key masked (zeros, as eager gives), grouped-query heads, head dims that
are not multiples of 16, key lengths unlike query lengths (causal is then top-left aligned) and strided
(transposed) operands.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from aotpack.build import build_package
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.verification import TOLERANCE, mismatch_report, relative_error, to_numpy
from torch import nn

HERE = Path(__file__).resolve()


class SelfAttention(nn.Module):
    """q, k, v from x [batch, seq, heads * dim] as Hugging Face models make them (transposed views)."""

    def __init__(self, heads: int, kv_heads: int, dim: int, value_dim: int, causal: bool, mask: str | None,
                 scale: float | None = None) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.dim, self.value_dim = heads, kv_heads, dim, value_dim
        self.causal, self.mask, self.scale = causal, mask, scale
        self.qkv = nn.Linear(16, heads * dim + kv_heads * (dim + value_dim))

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split([self.heads * self.dim, self.kv_heads * self.dim,
                                     self.kv_heads * self.value_dim], -1)
        q = q.view(b, s, self.heads, self.dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.value_dim).transpose(1, 2)
        mask = None
        if self.mask == "padding_bool":  # [b, 1, 1, s]: keys past each row's length masked
            mask = (pad > 0)[:, None, None, :]
        elif self.mask == "padding_additive":  # [b, 1, 1, s] as transformers builds it: finfo.min past the length
            mask = (1.0 - pad)[:, None, None, :] * torch.finfo(torch.float32).min
        elif self.mask == "additive_2d":  # [s, s], shared by every batch and head
            mask = pad[0][:, None] - pad[0][None, :]
        elif self.mask == "all_masked_rows":  # whole query rows masked: eager gives zeros there
            mask = (pad > 0)[:, None, :, None] & (pad > 0)[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal, scale=self.scale,
                                             enable_gqa=self.heads != self.kv_heads)
        return out.transpose(1, 2).reshape(b, s, self.heads * self.value_dim)


CASES = {
    # name: (heads, kv_heads, dim, value_dim, causal, mask, scale)
    "causal": (4, 4, 64, 64, True, None, None),
    "padding_bool": (2, 2, 32, 32, False, "padding_bool", None),
    "padding_additive": (2, 2, 32, 32, False, "padding_additive", None),
    "additive_2d_scale": (2, 2, 16, 16, False, "additive_2d", 0.3),
    "all_masked_rows": (2, 2, 16, 16, False, "all_masked_rows", None),
    "gqa_causal_dim80": (6, 2, 80, 80, True, None, None),
    "value_dim_differs": (2, 1, 24, 40, False, None, None),  # torch picks its math form: no fused kernel
    "causal_and_mask": (2, 2, 32, 32, True, "padding_bool", None),
    "head_dim_24": (3, 3, 24, 24, True, "additive_2d", None),  # value columns padded to 32 inside the kernel
}


class PositionMaskAttention(nn.Module):
    """Attention whose mask the model builds from positions, the way transformers' masking utilities do:
    aranges of positions, indexed by aranges of batch, query and key indices, compared (with a diagonal
    offset), optionally and-ed with a padding row. `memory` prepends a copy of the sequence to the keys, so
    keys are twice as long as queries and the query at row i sits at position i + seq."""

    def __init__(self, diagonal: int, padding: bool, memory: bool, spelling: str) -> None:
        super().__init__()
        self.diagonal, self.padding, self.memory, self.spelling = diagonal, padding, memory, spelling
        self.qkv = nn.Linear(16, 3 * 16)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, _, _ = (t.view(b, s, 2, 8).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        source = torch.cat([0.5 * x, x], 1) if self.memory else x
        _, k, v = (t.view(b, source.shape[1], 2, 8).transpose(1, 2) for t in self.qkv(source).chunk(3, -1))
        past = s if self.memory else 0
        cache_position = torch.arange(s) + past  # the queries' positions
        key_position = torch.arange(source.shape[1])
        batch_idx, q_idx = torch.arange(b), torch.arange(s)
        positions = cache_position[None, :].expand(b, -1)
        q_pos = positions[batch_idx[:, None, None, None], q_idx[None, None, :, None]]
        kv_pos = key_position[None, None, None, :]
        if self.spelling == "le":
            mask = kv_pos <= q_pos + self.diagonal
        elif self.spelling == "difference":
            mask = (q_pos - kv_pos) >= -self.diagonal
        elif self.spelling == "tril":
            mask = torch.ones(s, source.shape[1], dtype=torch.bool).tril(self.diagonal)
        else:  # "not_gt": ~(j > i + c)
            mask = ~(kv_pos > q_pos + self.diagonal)
        if self.padding:
            keys_pad = torch.cat([torch.ones_like(pad), pad], 1) if self.memory else pad
            mask = mask & (keys_pad > 0)[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(b, s, 16)


POSITION_CASES = {
    # name: (diagonal, padding, memory, spelling), and the causal offset the kernel must get (None: seq)
    "arange_causal": ((0, False, False, "le"), 0),
    "padding_and_causal": ((0, True, False, "le"), 0),
    "diagonal_plus_2": ((2, False, False, "difference"), 2),
    "diagonal_minus_1_padding": ((-1, True, False, "not_gt"), -1),  # row 0 sees no key: zeros, as eager gives
    "keys_past_a_memory": ((0, True, True, "le"), None),
    "tril_of_ones": ((1, False, False, "tril"), 1),
}


def attention_model(name: str) -> nn.Module:
    """The model of a case of CASES or POSITION_CASES (tests/codegen runs them in the Triton interpreter)."""
    if name in POSITION_CASES:
        return PositionMaskAttention(*POSITION_CASES[name][0]).eval()
    return SelfAttention(*CASES[name]).eval()


def _pad(batch: int, seq: int) -> torch.Tensor:
    """Per-row lengths as a 0/1 float mask; the first row is full, the others shorter (at least 1)."""
    lengths = [seq] + [max(1, seq - 5 * r) for r in range(1, batch)]
    return torch.tensor([[1.0 if j < n else 0.0 for j in range(seq)] for n in lengths])


def _dead_block_pad(seq: int, empty: bool = True) -> torch.Tensor:
    """Five rows of padding with whole blocks of keys masked at 150 keys: full, the first 10 keys, keys 100
    on (left padding), none (the first 10 instead unless `empty`), and the first and last 10 (a hole inside
    the live keys)."""
    return _live_keys_pad(seq, [range(seq), range(10), range(100, seq), range(0 if empty else 10),
                                [*range(10), *range(seq - 10, seq)]])


def _live_keys_pad(seq: int, live: list) -> torch.Tensor:
    """A 0/1 float mask with a row per entry of `live`, 1 at the keys it names."""
    return torch.tensor([[1.0 if j in keys else 0.0 for j in range(seq)] for keys in live])


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_attention_matches_eager(name, tmp_path, rt):
    torch.manual_seed(0)
    model = SelfAttention(*CASES[name]).eval()
    examples = (torch.randn(2, 8, 16), _pad(2, 8))
    spec = ModelSpec(HERE, model, examples, ("x", "pad"), {"x": {1: "seq"}, "pad": {1: "seq"}}, {"seq": (1, 130)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    targets = {str(n.target) for n in captured.program.graph.nodes if n.op == "call_function"}
    dim, value_dim = CASES[name][2:4]
    fused = "aten._scaled_dot_product_flash_attention_for_cpu.default" in targets
    assert fused == (dim == value_dim)  # torch's flash form needs equal dims; otherwise it records the math
    result = build_package(captured, tmp_path / f"{name}.aotpack")
    session = rt.Model(result.path).session(num_threads=2)
    for seq in (1, 7, 64, 65, 96, 97, 130):
        x, pad = torch.randn(2, seq, 16), _pad(2, seq)
        with torch.no_grad():
            expected = to_numpy(model(x, pad))
        out = session.run([to_numpy(x), to_numpy(pad)])[0]
        assert out.shape == expected.shape and relative_error(out, expected) <= TOLERANCE["float32"], \
            f"seq={seq}: " + mismatch_report("out", out, expected)


@pytest.mark.parametrize("name", ["padding_additive", "padding_bool"])
def test_key_blocks_a_padding_mask_removes_are_skipped_bit_for_bit(name, tmp_path, rt, monkeypatch):
    """The C++ kernel walks only the key blocks a padding mask leaves a score in (ir/mask_structure.py
    skips_dead_keys; blocks of 64 keys): against eager, and bit for bit against the kernel that walks every
    block. NaN in the keys and values of sequence 1's dead blocks proves they are not read: the walking
    kernel's zero weights times NaN give NaN in that sequence's live rows."""
    import aotpack
    from aotpack.lowering.backends.cpu import render as cpu_render

    torch.manual_seed(0)
    model = SelfAttention(*CASES[name]).eval()

    def export(path):  # as users export it: the public API, verification on over the range
        examples = (torch.randn(5, 8, 16), _dead_block_pad(8))
        return aotpack.export(model, examples, path, dynamic_shapes={"x": {1: "seq"}, "pad": {1: "seq"}},
                              ranges={"seq": (1, 160)}).path

    skipping = rt.Model(export(tmp_path / "skip.aotpack")).session(num_threads=2)
    monkeypatch.setattr(cpu_render, "skips_dead_keys", lambda kernel: False)
    walking = rt.Model(export(tmp_path / "walk.aotpack")).session(num_threads=2)
    x, pad = torch.randn(5, 150, 16), _dead_block_pad(150)
    with torch.no_grad():
        expected = to_numpy(model(x, pad))
    out = skipping.run([to_numpy(x), to_numpy(pad)])[0]
    assert relative_error(out, expected) <= TOLERANCE["float32"], mismatch_report("out", out, expected)
    assert (out == walking.run([to_numpy(x), to_numpy(pad)])[0]).all()
    x[1, 64:] = float("nan")
    skipped, walked = (s.run([to_numpy(x), to_numpy(pad)])[0] for s in (skipping, walking))
    assert np.isfinite(skipped[1, :10]).all() and np.isnan(walked[1, :10]).any()


def test_attention_kernel_replaces_scores_in_the_arena(tmp_path):
    """The fused kernel's arena holds no [heads, seq, seq] scores: it grows linearly with the sequence."""
    model = SelfAttention(4, 4, 64, 64, True, None).eval()
    sizes = []
    for top in (256, 512):
        spec = ModelSpec(HERE, model, (torch.randn(1, 8, 16), _pad(1, 8)), ("x", "pad"),
                         {"x": {1: "seq"}, "pad": {1: "seq"}}, {"seq": (1, top)})
        plan = resolve_symbols(spec)
        result = build_package(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()),
                               tmp_path / f"m{top}.aotpack")
        sizes.append(result.manifest["metadata"]["arena_bytes"])
    assert sizes[1] <= 2 * sizes[0] + 4096, sizes


class TwoLayersOneMask(nn.Module):
    """Two attention layers reading one [batch, 1, seq, seq] mask broadcast from a [batch, seq] padding row."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.ModuleList(nn.Linear(16, 3 * 16) for _ in range(2))

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        mask = (pad[:, None, :, None] > -1) & (pad[:, None, None, :] > 0)
        for qkv in self.qkv:
            q, k, v = (t.view(b, s, 2, 8).transpose(1, 2) for t in qkv(x).chunk(3, -1))
            x = x + F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, s, 16)
        return x


def test_a_broadcast_mask_is_recomputed_not_stored(tmp_path, rt):
    """The shared [batch, 1, seq, seq] mask stays an expression of the [batch, seq] input (no seq x seq buffer),
    and the result still matches eager."""
    from aotpack.lowering.frontend.graph import GraphLowering

    torch.manual_seed(0)
    model = TwoLayersOneMask().eval()
    spec = ModelSpec(HERE, model, (torch.randn(2, 8, 16), _pad(2, 8)), ("x", "pad"),
                     {"x": {1: "seq"}, "pad": {1: "seq"}}, {"seq": (1, 64)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    program = GraphLowering(captured).run()
    assert sum(step.family == "attention" for step in program.steps) == 2
    assert not [b for b in program.buffers.values() if b.dtype == "bool" and len(b.shape) >= 3], program.buffers
    session = rt.Model(build_package(captured, tmp_path / "m.aotpack").path).session(num_threads=2)
    for seq in (1, 9, 64):
        x, pad = torch.randn(2, seq, 16), _pad(2, seq)
        with torch.no_grad():
            expected = to_numpy(model(x, pad))
        out = session.run([to_numpy(x), to_numpy(pad)])[0]
        assert relative_error(out, expected) <= TOLERANCE["float32"], mismatch_report("out", out, expected)


@pytest.mark.parametrize("name", sorted(POSITION_CASES))
def test_mask_built_from_positions_is_index_math_and_causal(name, tmp_path, rt):
    """The mask stays an expression of the row and key index (no arena buffer holds it), its causal term becomes
    the kernel's causal diagonal (key blocks past it are skipped), what else it masks stays the mask; and the
    result matches eager across block edges."""
    from aotpack.lowering.frontend.graph import GraphLowering
    from aotpack.lowering.ir.symbolic import size_symbol

    torch.manual_seed(0)
    model = attention_model(name)
    spec = ModelSpec(HERE, model, (torch.randn(2, 8, 16), _pad(2, 8)), ("x", "pad"),
                     {"x": {1: "seq"}, "pad": {1: "seq"}}, {"seq": (1, 130)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    program = GraphLowering(captured).run()
    (step,) = [s for s in program.steps if s.family == "attention"]
    expected_offset = POSITION_CASES[name][1]
    assert step.causal and step.causal_offset == (size_symbol("seq") if expected_offset is None else expected_offset)
    assert (step.mask is None) == (not POSITION_CASES[name][0][1]), step.mask  # only padding remains
    qkv = {step.q.buffer, step.k.buffer, step.v.buffer}
    assert not [b for b in step.reads() if b not in qkv and program.buffers[b].kind == "arena"], step.mask
    assert all(len(b.shape) < 3 for b in program.buffers.values() if b.dtype == "bool"), program.buffers
    session = rt.Model(build_package(captured, tmp_path / f"{name}.aotpack").path).session(num_threads=2)
    for seq in (1, 7, 64, 65, 97, 130):
        x, pad = torch.randn(2, seq, 16), _pad(2, seq)
        with torch.no_grad():
            expected = to_numpy(model(x, pad))
        out = session.run([to_numpy(x), to_numpy(pad)])[0]
        assert out.shape == expected.shape and relative_error(out, expected) <= TOLERANCE["float32"], \
            f"seq={seq}: " + mismatch_report("out", out, expected)
