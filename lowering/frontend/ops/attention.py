"""Scaled dot-product attention as one fused kernel (ir.AttentionKernel) instead of its math form.

The math form stores the [batch, heads, q_len, kv_len] scores and probabilities between a matmul, a softmax
and a matmul: at seq 2048 that is the largest buffer of a transformer's arena and most of its memory traffic.
The fused kernel keeps a block of scores in registers or cache and folds it into the output with an online
softmax, so memory grows with the sequence, not with its square.

torch.export records `F.scaled_dot_product_attention` on CPU as `_scaled_dot_product_flash_attention_for_cpu`
(a boolean mask already turned into an additive one); decompositions.py keeps that op whole for us.

A mask that the model builds from positions (transformers' causal masks) arrives here as index math
(ir/index_math.py); when its causal term is proved (ir/mask_structure.py) the kernel is causal, skipping
the key blocks past the diagonal, and only the mask's other terms remain to evaluate per score.
"""

from __future__ import annotations

import math

import sympy
import torch

from ....errors import UnsupportedError
from ...ir.kernels import AttentionKernel
from ...ir.mask_structure import as_selection, causal_split, with_decided_comparisons
from ...ir.symbolic import index_var
from .. import values as V
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue

aten = OptionalOps(torch.ops.aten)


@lowers(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _flash_attention_for_cpu(ctx: GraphLowering, node: torch.fx.Node, query: TensorValue, key: TensorValue,
                             value: TensorValue, dropout_p: float = 0.0, is_causal: bool = False, *,
                             attn_mask: TensorValue | None = None, scale: float | None = None) -> tuple:
    out = attention(ctx, query, key, value, attn_mask, bool(is_causal), scale, dropout_p)
    return out, None  # the log-sum-exp output serves only backward; reading it is reported unsupported


def attention(ctx: GraphLowering, query: TensorValue, key: TensorValue, value: TensorValue,
              mask: TensorValue | None, causal: bool, scale: float | None, dropout_p: float = 0.0) -> TensorValue:
    """softmax(query @ key^T * scale + mask) @ value for [batch, heads, rows, dim] operands."""
    if dropout_p:
        raise UnsupportedError(f"attention with dropout_p={dropout_p}: an exported model runs in eval mode; "
                               "call model.eval() (or pass dropout_p=0) before export")
    if query.rank != 4 or key.rank != 4 or value.rank != 4:
        raise UnsupportedError("attention takes [batch, heads, seq, dim] query, key and value")
    batch, heads, q_len, head_dim = query.shape
    kv_heads, kv_len, value_dim = key.shape[1], key.shape[2], value.shape[3]
    if not (head_dim.is_number and value_dim.is_number and heads.is_number and kv_heads.is_number):
        raise UnsupportedError("attention needs fixed head counts and head dims (only batch and seq may vary)")
    if int(heads) % int(kv_heads):
        raise UnsupportedError(f"grouped-query attention needs the query heads ({heads}) to be a multiple of the "
                               f"key/value heads ({kv_heads})")
    if sympy.simplify(key.shape[0] - batch) != 0 or tuple(value.shape[:3]) != tuple(key.shape[:3]):
        raise UnsupportedError("attention's query, key and value must agree in batch, and key and value in heads "
                               "and length")
    dtype = query.dtype
    if not (key.dtype == value.dtype == dtype) or dtype not in ("float32", "float16", "bfloat16"):
        raise UnsupportedError(f"attention of {query.dtype}/{key.dtype}/{value.dtype}: float32, float16 or "
                               "bfloat16, all the same, are supported")
    mask_node = None
    if mask is not None:
        full = (batch, heads, q_len, kv_len)
        if mask.rank > 4:
            raise UnsupportedError(f"an attention mask of rank {mask.rank} does not broadcast to {full}")
        mask_node = V.broadcast_to(mask, full).loader(tuple(index_var("i", d) for d in range(4)))
        mask_node = with_decided_comparisons(mask_node, full, ctx.ranges())
    offset = sympy.Integer(0)
    split = causal_split(mask_node) if mask_node is not None else None
    if split is not None and (not causal or split.offset == 0):
        # A mask built from positions that excludes every key past a diagonal: the kernel skips those key
        # blocks as for is_causal, and keeps the mask's other terms (a padding mask) as the mask.
        causal, offset, mask_node = True, split.offset, split.rest
    if mask_node is not None and mask_node.dtype != "bool":
        mask_node = as_selection(mask_node) or mask_node  # a mask of 0 and -inf selects (mask_structure.py)
    if kv_heads == heads:
        key, value, kv_heads = grouped_heads(key, value, int(heads))
    out_shape = (batch, q_len, heads, value_dim)
    out = ctx.new_buffer(dtype, out_shape)
    ctx.add_step(AttentionKernel(
        output=out, q=ctx.as_view(query), k=ctx.as_view(key), v=ctx.as_view(value), batch=batch, heads=heads,
        kv_heads=kv_heads, q_len=q_len, kv_len=kv_len, head_dim=head_dim, value_dim=value_dim,
        scale=float(scale) if scale is not None else 1.0 / math.sqrt(int(head_dim)), causal=causal,
        mask=mask_node, dtype=dtype, causal_offset=offset,
    ))
    return V.permute(V.from_buffer(out, dtype, out_shape), (0, 2, 1, 3))


def grouped_heads(key: TensorValue, value: TensorValue, heads: int) -> tuple[TensorValue, TensorValue, int]:
    """Key and value over their distinct heads when they repeat each of them `group` times along the heads
    dimension (transformers' repeat_kv for grouped-query attention: an expand and a reshape, which reach here as
    index math over head // group), with the kv head count; else unchanged, with `heads`.

    The attention kernel reads the kv head of query head h as h // group itself, so the repeated copy is never
    stored, and what is computed per kv head (Llama's rotary embedding of the keys) is computed once per group.
    The repetition is proved on the loaders: the element of head group * j + r is the same expression for every
    r < group (torch's FloorDiv folds (group * j + r) // group to j)."""
    j = sympy.Symbol("kv_head", integer=True, nonnegative=True)
    index = [index_var("i", d) for d in range(4)]

    def repeats(t: TensorValue, group: int) -> bool:
        at = [t.loader((index[0], group * j + r, index[2], index[3])) for r in range(group)]
        return all(node == at[0] for node in at[1:])

    for group in sorted((g for g in range(2, heads + 1) if heads % g == 0), reverse=True):
        if repeats(key, group) and repeats(value, group):
            def narrowed(t: TensorValue, group: int = group) -> TensorValue:
                shape = (t.shape[0], sympy.Integer(heads // group), t.shape[2], t.shape[3])
                return TensorValue(t.dtype, shape, lambda idx: t.loader((idx[0], idx[1] * group, idx[2], idx[3])))

            return narrowed(key), narrowed(value), sympy.Integer(heads // group)
    return key, value, sympy.Integer(heads)
