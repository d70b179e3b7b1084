"""Ops that pick elements by position or by data: embedding, index_select, gather, indexing, cat, pad.

All stay lazy. Reads whose position may be out of bounds (cat's other inputs, padding) use a clamped
index and a select, so a generated kernel never reads outside a buffer whatever it hoists or reorders.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch

from ....errors import UnsupportedError
from ...ir.index_math import as_index_expr, provably_in_range
from ...ir.scalar import Const, IndexValue, Indirect, Load, Node, Op, cast
from ...ir.symbolic import index_var
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue, broadcast_to, unsqueeze

aten = OptionalOps(torch.ops.aten)
# An element's position along an indexed dim, from the index of the index tensor's element.
PositionMap = Callable[[tuple], sympy.Expr]


def indirect_load(x: TensorValue, idx: list[Any], dim: int, position: Node, what: str, wrap: bool) -> Node:
    """x[idx] with idx[dim] taken from data: checked, clamped, and reported if out of range."""
    if x.rank == 0:  # a 0-d tensor indexes like one of shape [1]
        x, idx, dim = unsqueeze(x, 0), [sympy.Integer(0)], 0
    var = sympy.Symbol(f"x{dim}", integer=True)
    idx = list(idx)
    idx[dim] = var
    node = x.loader(tuple(idx))
    indirect = Indirect(var, cast(position, "int64"), x.shape[dim], wrap, what)
    return attach_indirect(node, indirect)


def attach_indirect(node: Node, indirect: Indirect) -> Node:
    """Adds `indirect` to every load whose index uses its variable, including the loads that compute other
    positions (a gather of a gather). A load that binds the same variable already (an inner gather along the
    same dimension) keeps its own binding."""
    if isinstance(node, Load):
        inner = tuple(Indirect(i.var, attach_indirect(i.value, indirect), i.size, i.wrap, i.what) for i in node.indirect)
        bound = any(i.var == indirect.var for i in node.indirect)
        if indirect.var in node.index.free_symbols and not bound:
            inner += (indirect,)
        return Load(node.buffer, node.index, node.dtype, inner)
    if isinstance(node, Op):
        return Op(node.name, tuple(attach_indirect(a, indirect) for a in node.args), node.dtype)
    if isinstance(node, IndexValue) and indirect.var in node.expr.free_symbols:
        raise AssertionError(f"aotpack bug: a position from data reached {node}; the gathered value must be stored "
                             "first (see addressable)")
    return node


def positions_as_index_math(ctx: GraphLowering, index: TensorValue, size: sympy.Expr) -> PositionMap | None:
    """When `index` is computed from positions alone (an arange, offset and broadcast: transformers indexes
    `cache_position[q_idx]` to build its masks) and provably lies in 0..size-1 over the declared ranges, the
    function from an element's index to its position as index math: the op that indexes with it becomes a
    view, with no gather, no bounds check and no stored position tensor. None otherwise (a position read from
    data, or one that might be out of range: those keep the checked gather)."""
    local = tuple(sympy.Symbol(f"p{d}", integer=True, nonnegative=True) for d in range(index.rank))
    expr = as_index_expr(index.loader(local))
    if expr is None:
        return None
    if not provably_in_range(expr, size, {v: n - 1 for v, n in zip(local, index.shape)}, ctx.ranges()):
        return None
    return lambda idx: sympy.expand(expr.xreplace(dict(zip(local, idx))))


def addressable(ctx: GraphLowering, x: TensorValue) -> TensorValue:
    """x, stored in a buffer first if any of its elements is computed from its own position outside a load
    (an arange, a causal mask): a position taken from data is checked and bound only in a load's index."""
    if x.view is not None:
        return x
    index = tuple(index_var("i", d) for d in range(x.rank))
    if _uses_position(x.loader(index), set(index)):
        return ctx.realize(x)
    return x


def _uses_position(node: Node, index: set) -> bool:
    if isinstance(node, IndexValue):
        return bool(node.expr.free_symbols & index)
    if isinstance(node, Op):
        return any(_uses_position(a, index) for a in node.args)
    if isinstance(node, Load):
        return any(_uses_position(i.value, index) for i in node.indirect)
    return False


@lowers(aten.embedding.default)
def _embedding(ctx: GraphLowering, node: torch.fx.Node, weight: TensorValue, indices: TensorValue, *args: Any) -> TensorValue:
    what = f"embedding at {ctx.where()}: an index is outside 0..{weight.shape[0]}-1"
    direct = positions_as_index_math(ctx, indices, weight.shape[0])
    if direct is not None:
        return TensorValue(weight.dtype, ctx.shape_of(node), lambda idx: weight.loader((direct(idx[:-1]), idx[-1])))
    weight = addressable(ctx, weight)

    def load(idx: tuple) -> Node:
        return indirect_load(weight, [sympy.Integer(0), idx[-1]], 0, indices.loader(idx[:-1]), what, False)

    return TensorValue(weight.dtype, ctx.shape_of(node), load)


@lowers(aten.index_select.default)
def _index_select(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int, index: TensorValue) -> TensorValue:
    dim %= max(x.rank, 1)
    what = f"index_select at {ctx.where()}: an index is outside the dimension"
    if index.rank and x.rank:
        direct = positions_as_index_math(ctx, index, x.shape[dim])
        if direct is not None:
            return TensorValue(x.dtype, ctx.shape_of(node),
                               lambda idx: x.loader((*idx[:dim], direct((idx[dim],)), *idx[dim + 1:])))
    x = addressable(ctx, x)

    def load(idx: tuple) -> Node:
        pos = index.loader((idx[dim],) if index.rank and x.rank else ())
        return indirect_load(x, list(idx), dim, pos, what, False)

    return TensorValue(x.dtype, ctx.shape_of(node), load)


@lowers(aten.gather.default)
def _gather(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int, index: TensorValue, *args: Any) -> TensorValue:
    dim %= max(x.rank, 1)
    what = f"gather at {ctx.where()}: an index is outside the dimension"
    direct = positions_as_index_math(ctx, index, x.shape[dim]) if x.rank else None
    if direct is not None:
        return TensorValue(x.dtype, ctx.shape_of(node),
                           lambda idx: x.loader((*idx[:dim], direct(idx), *idx[dim + 1:])))
    x = addressable(ctx, x)

    def load(idx: tuple) -> Node:
        return indirect_load(x, list(idx), dim, index.loader(idx), what, False)

    return TensorValue(x.dtype, ctx.shape_of(node), load)


@lowers(aten.index.Tensor)
def _index(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, indices: list[Any]) -> TensorValue:
    """Advanced indexing x[..., i, j, ...] with index tensors (None for a full slice)."""
    out_shape = ctx.shape_of(node)
    indexed = [d for d, ix in enumerate(indices) if ix is not None]
    for d in indexed:
        if indices[d].dtype == "bool":
            raise UnsupportedError("indexing with a boolean mask gives a data-dependent shape; use torch.where")
    adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
    first = indexed[0] if adjacent else 0
    bshape_rank = len(out_shape) - (x.rank - len(indexed))
    bshape = out_shape[first:first + bshape_rank]
    what = f"indexing at {ctx.where()}: an index is outside the dimension"
    direct = {d: positions_as_index_math(ctx, broadcast_to(indices[d], bshape), x.shape[d]) for d in indexed}
    if all(f is not None for f in direct.values()):
        return TensorValue(x.dtype, out_shape, lambda idx: x.loader(_indexed_by_math(x.rank, idx, first, bshape_rank,
                                                                                     direct)))
    x = addressable(ctx, x)

    def load(idx: tuple) -> Node:
        bidx = idx[first:first + bshape_rank]
        rest = list(idx[:first]) + list(idx[first + bshape_rank:])
        src: list[Any] = []
        for d in range(x.rank):
            src.append(None if d in indexed else rest.pop(0))
        node_value: Node | None = None
        for d in indexed:
            var = sympy.Symbol(f"x{d}", integer=True)
            src[d] = var
        node_value = x.loader(tuple(src))
        for d in indexed:
            pos = broadcast_to(indices[d], bshape).loader(bidx)
            node_value = attach_indirect(node_value, Indirect(sympy.Symbol(f"x{d}", integer=True), cast(pos, "int64"),
                                                      x.shape[d], True, what))
        return node_value

    return TensorValue(x.dtype, out_shape, load)


def _indexed_by_math(rank: int, idx: tuple, first: int, bshape_rank: int, direct: dict[int, PositionMap]) -> tuple:
    """x's index for output element `idx` of x[..., i, j, ...] when every index tensor is index math: the
    broadcast index dims (at `first`) give the indexed dims' positions, the others pass through in order."""
    bidx = idx[first:first + bshape_rank]
    rest = list(idx[:first]) + list(idx[first + bshape_rank:])
    return tuple(direct[d](bidx) if d in direct else rest.pop(0) for d in range(rank))


def _clamp_index(i: sympy.Expr, size: sympy.Expr) -> sympy.Expr:
    return sympy.Max(0, sympy.Min(i, size - 1))


def _in_range(i: sympy.Expr, lo: sympy.Expr, hi: sympy.Expr) -> Node:
    ge = Op("ge", (IndexValue(i, "int64"), IndexValue(lo, "int64")), "bool")
    lt = Op("lt", (IndexValue(i, "int64"), IndexValue(hi, "int64")), "bool")
    return Op("logical_and", (ge, lt), "bool")


@lowers(aten.cat.default)
def _cat(ctx: GraphLowering, node: torch.fx.Node, tensors: list[TensorValue], dim: int = 0) -> TensorValue:
    out_shape = ctx.shape_of(node)
    out_dtype = ctx.dtype_of(node)
    dim %= len(out_shape)
    # Legacy cat skips 1-d empty tensors.
    parts = [t for t in tensors if not (t.rank == 1 and t.shape[0] == 0)] or tensors[:1]
    starts = []
    start: sympy.Expr = sympy.Integer(0)
    for t in parts:
        starts.append(start)
        start = start + t.shape[dim]

    def load(idx: tuple) -> Node:
        i = idx[dim]
        result: Node | None = None
        for t, s in reversed(list(zip(parts, starts))):
            src = list(idx)
            src[dim] = _clamp_index(i - s, t.shape[dim])
            value = cast(t.loader(tuple(src)), out_dtype)
            if result is None:
                result = value
            else:
                result = Op("where", (Op("lt", (IndexValue(i, "int64"), IndexValue(s + t.shape[dim], "int64")), "bool"),
                                      value, result), out_dtype)
        return result

    return TensorValue(out_dtype, out_shape, load)


@lowers(aten.stack.default)
def _stack(ctx: GraphLowering, node: torch.fx.Node, tensors: list[TensorValue], dim: int = 0) -> TensorValue:
    from ..values import unsqueeze

    rank = tensors[0].rank + 1
    dim %= rank
    out_dtype = ctx.dtype_of(node)
    parts = [unsqueeze(t, dim) for t in tensors]
    out_shape = ctx.shape_of(node)

    def load(idx: tuple) -> Node:
        i = idx[dim]
        result: Node | None = None
        for k, t in reversed(list(enumerate(parts))):
            src = list(idx)
            src[dim] = sympy.Integer(0)
            value = cast(t.loader(tuple(src)), out_dtype)
            result = value if result is None else Op(
                "where", (Op("eq", (IndexValue(i, "int64"), Const(k, "int64")), "bool"), value, result), out_dtype)
        return result

    return TensorValue(out_dtype, out_shape, load)


@lowers(aten.constant_pad_nd.default)
def _pad(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, pad: list[Any], value: Any = 0) -> TensorValue:
    out_shape = ctx.shape_of(node)
    befores = {x.rank - 1 - k: ctx.sym(pad[2 * k]) for k in range(len(pad) // 2)}
    fill = Const(value, "float64") if isinstance(value, float) else Const(int(value), "int64")

    def load(idx: tuple) -> Node:
        src = list(idx)
        valid: Node | None = None
        for d, before in befores.items():
            src[d] = _clamp_index(idx[d] - before, x.shape[d])
            inside = _in_range(idx[d] - before, sympy.Integer(0), x.shape[d])
            valid = inside if valid is None else Op("logical_and", (valid, inside), "bool")
        loaded = x.loader(tuple(src))
        if valid is None:
            return loaded
        return Op("where", (valid, loaded, cast(fill, x.dtype)), x.dtype)

    return TensorValue(x.dtype, out_shape, load)


@lowers(aten.tril.default, aten.triu.default)
def _tri(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, diagonal: int = 0) -> TensorValue:
    lower = node.target is aten.tril.default

    def load(idx: tuple) -> Node:
        row, col = IndexValue(idx[-2] + diagonal, "int64"), IndexValue(idx[-1], "int64")
        keep = Op("le" if lower else "ge", (col, row), "bool")
        return Op("where", (keep, x.loader(idx), cast(Const(0, "int64"), x.dtype)), x.dtype)

    return TensorValue(x.dtype, x.shape, load)

