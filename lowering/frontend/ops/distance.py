"""Pairwise distances: cdist and pdist as a reduction over the feature dim of a fused |a - b| ** p.

p = 0 counts the differing features, p = inf takes the largest difference, p = 2 is the Euclidean norm.
Euclidean distances are computed directly, not through eager's matrix-product shortcut, which loses
precision where points are close.
"""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch

from ....errors import UnsupportedError
from ...ir.scalar import Const, Node, Op, cast
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue, broadcast_to, from_buffer
from .index import addressable, indirect_load

aten = OptionalOps(torch.ops.aten)


def _term(a: Node, b: Node, p: float, dtype: str) -> Node:
    diff = Op("abs", (Op("sub", (a, b), dtype),), dtype)
    if p == 0:
        return cast(Op("ne", (diff, Const(0.0, dtype)), "bool"), dtype)
    if p in (1, math.inf):
        return diff
    if p == 2:
        return Op("mul", (diff, diff), dtype)
    return Op("pow", (diff, Const(float(p), dtype)), dtype)


def _norms(ctx: GraphLowering, shape: tuple, features: sympy.Expr, p: float, dtype: str,
           term: Any) -> TensorValue:
    """The p-norm over the features of term(index, feature) for every index of `shape`."""
    full = TensorValue(dtype, (*shape, features), lambda idx: term(idx[:-1], idx[-1]))
    total = ctx.reduce(full, [len(shape)], "max" if p == math.inf else "sum", dtype)

    def finish(idx: tuple) -> Node:
        value = total.loader(idx)
        if p == math.inf:  # no features: the maximum of nothing is 0, as in eager
            return Op("maximum", (value, Const(0.0, dtype)), dtype)
        if p == 2:
            return Op("sqrt", (value,), dtype)
        if p in (0, 1):
            return value
        return Op("pow", (value, Const(1.0 / p, dtype)), dtype)

    return TensorValue(dtype, tuple(shape), finish)


@lowers(aten._cdist_forward.default)
def _cdist(ctx: GraphLowering, node: torch.fx.Node, x1: TensorValue, x2: TensorValue, p: float,
           compute_mode: Any = None) -> TensorValue:
    shape = ctx.shape_of(node)  # [*batch, P, R]
    dtype = ctx.dtype_of(node)
    features = x1.shape[-1]
    a = broadcast_to(x1, (*shape[:-1], features))
    b = broadcast_to(x2, (*shape[:-2], shape[-1], features))

    def term(idx: tuple, k: sympy.Expr) -> Node:
        return _term(a.loader((*idx[:-1], k)), b.loader((*idx[:-2], idx[-1], k)), p, dtype)

    return _norms(ctx, shape, features, p, dtype, term)


@lowers(aten._pdist_forward.default)
def _pdist(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, p: float = 2.0) -> TensorValue:
    """Distances of the rows i < j, in row-major order of (i, j): the pairs are a constant table."""
    rows = x.shape[0]
    if not rows.is_Integer:
        raise UnsupportedError("pdist of a dynamic number of rows is not supported (the row count must be fixed)")
    pairs = torch.triu_indices(int(rows), int(rows), 1).T.contiguous()
    table = from_buffer(ctx.weight(pairs, f"{node.name}_pairs"), "int64",
                        (sympy.Integer(len(pairs)), sympy.Integer(2)))
    x = addressable(ctx, x)
    dtype = ctx.dtype_of(node)
    what = f"pdist at {ctx.where()}: a row of the pair table is outside the input (an aotpack bug)"

    def term(idx: tuple, k: sympy.Expr) -> Node:
        i, j = (indirect_load(x, [None, k], 0, table.loader((idx[0], sympy.Integer(c))), what, False)
                for c in (0, 1))
        return _term(i, j, p, dtype)

    return _norms(ctx, ctx.shape_of(node), x.shape[1], p, dtype, term)
