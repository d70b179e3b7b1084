"""Ops that write elements to positions taken from data: index_put, scatter, scatter_add, scatter_reduce,
masked_scatter (and through torch's decompositions index_copy, index_fill, index_add, max_unpool).

Integer positions become a ScatterKernel (ir.py): one pointwise kernel writes the base into a new buffer,
then the scatter kernel updates that buffer in place, one update after another. A boolean mask picks every
position at most once, so those forms stay lazy instead: out[i] = mask[i] ? source[k] : base[i], where k
counts the true elements before i (a running sum).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from ....errors import UnsupportedError
from ...ir.dtypes import is_float
from ...ir.kernels import ScatterKernel
from ...ir.scalar import Const, Indirect, Load, Node, Op, cast
from ...ir.symbolic import Expr, index_var, product
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue, broadcast_to, from_buffer, reshape
from .index import addressable, indirect_load
from .reduce import cumulative

aten = OptionalOps(torch.ops.aten)

# A position in the output: a size expression over the update indices, or a value read from data.
Position = Expr | Node


def _cast(x: TensorValue, dtype: str) -> TensorValue:
    return x if x.dtype == dtype else TensorValue(dtype, x.shape, lambda idx: cast(x.loader(idx), dtype))


def _filled(dtype: str, shape: Sequence[Expr], value: Any) -> TensorValue:
    literal = Const(value, "float64" if is_float(dtype) else "int64")
    return TensorValue(dtype, tuple(shape), lambda idx: cast(literal, dtype))


def scatter(ctx: GraphLowering, base: TensorValue, shape: Sequence[Expr],
            target: Callable[[tuple[Expr, ...]], list[Position]], value: Callable[[tuple[Expr, ...]], Node],
            op: str, what: str, wrap: bool) -> TensorValue:
    """A copy of `base`, then for every index u of `shape` in order:
    out[target(u)] = op(out[target(u)], value(u)).

    Positions read from data are checked against their dim (negative ones counted from the end when `wrap`);
    a bad one is reported with `what`.
    """
    out = ctx.realize(base)
    # A 0-d output is addressed like one of shape [1], so that its one position can still be checked.
    sizes = base.shape or (sympy.Integer(1),)
    u = tuple(index_var("u", d) for d in range(len(shape)))
    index: list[Expr] = []
    indirect: list[Indirect] = []
    for d, pos in enumerate(target(u)):
        if isinstance(pos, sympy.Expr):
            index.append(pos)
            continue
        var = sympy.Symbol(f"x{d}", integer=True)
        index.append(var)
        indirect.append(Indirect(var, cast(pos, "int64"), sizes[d], wrap, what))
    addressed = from_buffer(out.view.buffer, base.dtype, sizes).loader(tuple(index))
    kernel_target = Load(addressed.buffer, addressed.index, addressed.dtype, tuple(indirect))
    ctx.add_step(ScatterKernel(out.view.buffer, tuple(shape), kernel_target, cast(value(u), base.dtype), op))
    return out


def _at(x: TensorValue, u: tuple[Expr, ...]) -> Node:
    """x at the leading indices u (a tensor of lower rank than the update space reads its first dims)."""
    return x.loader(tuple(u[: x.rank]) + (sympy.Integer(0),) * (x.rank - len(u)))


def _broadcast_shape(shapes: Sequence[Sequence[Expr]]) -> tuple[Expr, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(rank):
        sizes = [s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0]
        out.append(next((size for size in sizes if size != 1), sympy.Integer(1)))
    return tuple(out)


# --- index_put ------------------------------------------------------------------------------------------


@lowers(aten.index_put.default)
def _index_put(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, indices: list[Any], values: TensorValue,
               accumulate: bool = False) -> TensorValue:
    """x[indices] = values (+= with accumulate): the positions a matching x[indices] would read."""
    dtype = ctx.dtype_of(node)
    x, values = _cast(x, dtype), _cast(values, dtype)
    indices = list(indices) + [None] * (x.rank - len(indices))
    if any(ix is not None and ix.dtype == "bool" for ix in indices):
        return _masked_put(ctx, x, indices, values, accumulate)
    indexed = [d for d, ix in enumerate(indices) if ix is not None]
    bshape = _broadcast_shape([indices[d].shape for d in indexed])
    # As in indexing: adjacent index tensors put their broadcast dims where they are, others put them first.
    first = indexed[0] if indexed == list(range(indexed[0], indexed[-1] + 1)) else 0
    rest = [x.shape[d] for d in range(x.rank) if d not in indexed]
    shape = (*rest[:first], *bshape, *rest[first:])
    full = broadcast_to(values, shape)

    def target(u: tuple[Expr, ...]) -> list[Position]:
        b = u[first:first + len(bshape)]
        others = list(u[:first]) + list(u[first + len(bshape):])
        return [broadcast_to(indices[d], bshape).loader(b) if d in indexed else others.pop(0)
                for d in range(x.rank)]

    what = f"index_put at {ctx.where()}: an index is outside the dimension"
    return scatter(ctx, x, shape, target, full.loader, "sum" if accumulate else "assign", what, wrap=True)


def _masked_put(ctx: GraphLowering, x: TensorValue, indices: list[Any], values: TensorValue,
                accumulate: bool) -> TensorValue:
    """x[mask] = values with one boolean index tensor over dims p..p+k-1: values are broadcast to
    [x.shape[:p], number of trues, x.shape[p+k:]], so the true element i takes value row (trues before i)."""
    given = [d for d, ix in enumerate(indices) if ix is not None]
    if len(given) != 1:
        raise UnsupportedError("indexing with a boolean mask together with other index tensors is not supported; "
                               "index with one mask, or with integer index tensors")
    p = given[0]
    mask = indices[p]
    k = mask.rank
    # values line up with [x.shape[:p], trues, x.shape[p+k:]] from the right; `row` is values' dim of the trues.
    rank = x.rank - k + 1
    row = next((j for j in range(values.rank) if j + rank - values.rank == p and values.shape[j] != 1), None)
    before = _trues_before(ctx, mask) if row is not None else None
    values = addressable(ctx, values) if row is not None else values
    what = f"index_put at {ctx.where()}: values has fewer rows than the mask has true elements"

    def load(idx: tuple) -> Node:
        m = idx[p:p + k]
        vidx: list[Expr] = []
        for j in range(values.rank):
            d = j + rank - values.rank
            vidx.append(sympy.Integer(0) if values.shape[j] == 1 or d == p else idx[d if d < p else d - 1 + k])
        if row is None:
            update = values.loader(tuple(vidx))
        else:
            update = indirect_load(values, vidx, row, before.loader(m), what, False)
        if accumulate:
            update = Op("add", (x.loader(idx), update), x.dtype)
        return Op("where", (mask.loader(m), update, x.loader(idx)), x.dtype)

    return TensorValue(x.dtype, x.shape, load)


def _trues_before(ctx: GraphLowering, mask: TensorValue) -> TensorValue:
    """For every true element of mask, the number of true elements before it in row-major order; 0 for the
    false ones (whose update is not used, so its position must not fail the bounds check)."""
    flat = reshape(mask, (product(mask.shape),))
    running = cumulative(ctx, _cast(flat, "int64"), 0, "sum", "int64")
    counts = reshape(running, mask.shape)

    def load(idx: tuple) -> Node:
        keep = mask.loader(idx)
        before = Op("sub", (counts.loader(idx), Const(1, "int64")), "int64")
        return Op("where", (cast(keep, "bool"), before, Const(0, "int64")), "int64")

    return TensorValue("int64", mask.shape, load)


@lowers(aten.masked_scatter.default)
def _masked_scatter(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, mask: TensorValue,
                    source: TensorValue) -> TensorValue:
    """Where mask (broadcast to x) is true, the next element of source, in row-major order."""
    shape = ctx.shape_of(node)
    x, mask = broadcast_to(_cast(x, ctx.dtype_of(node)), shape), broadcast_to(mask, shape)
    before = _trues_before(ctx, mask)
    flat = addressable(ctx, reshape(_cast(source, x.dtype), (product(source.shape),)))
    what = f"masked_scatter at {ctx.where()}: source has fewer elements than mask has true elements"

    def load(idx: tuple) -> Node:
        update = indirect_load(flat, [sympy.Integer(0)], 0, before.loader(idx), what, False)
        return Op("where", (mask.loader(idx), update, x.loader(idx)), x.dtype)

    return TensorValue(x.dtype, shape, load)


# --- scatter --------------------------------------------------------------------------------------------

_REDUCE_OPS = {"sum": "sum", "add": "sum", "prod": "prod", "multiply": "prod", "amax": "max", "amin": "min",
               "mean": "sum"}


def _along(ctx: GraphLowering, x: TensorValue, dim: int, index: TensorValue, src: TensorValue | Any, op: str,
           what: str) -> TensorValue:
    """out[..., index[u], ...] (index replacing u's position in dim) = op(that, src[u]) for every u of index."""
    dim %= max(x.rank, 1)

    def target(u: tuple[Expr, ...]) -> list[Position]:
        pos: list[Position] = list(u[: x.rank]) + [sympy.Integer(0)] * (max(x.rank, 1) - len(u))
        pos[dim] = _at(index, u)
        return pos

    def value(u: tuple[Expr, ...]) -> Node:
        if isinstance(src, TensorValue):
            return _at(src, u)
        return Const(src, "float64" if isinstance(src, float) else ("bool" if isinstance(src, bool) else "int64"))

    return scatter(ctx, x, index.shape, target, value, op, what, wrap=False)


@lowers(aten.scatter.src, aten.scatter.value, aten.scatter_add.default, aten.scatter.reduce,
        aten.scatter.value_reduce)
def _scatter(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int, index: TensorValue, src: Any,
             reduce: str | None = None) -> TensorValue:
    op = "sum" if node.target is aten.scatter_add.default else _REDUCE_OPS.get(reduce, "assign")
    what = f"{node.target.__name__.split('.')[0]} at {ctx.where()}: an index is outside the dimension"
    return _along(ctx, _cast(x, ctx.dtype_of(node)), dim, index, src, op, what)


@lowers(aten.scatter_reduce.two)
def _scatter_reduce(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int, index: TensorValue,
                    src: TensorValue, reduce: str, include_self: bool = True) -> TensorValue:
    """Without include_self, targets start from the reduction's identity; mean is a sum divided by the number
    of values folded in (floored for integers, as eager does)."""
    dtype = ctx.dtype_of(node)
    x = _cast(x, dtype)
    op = _REDUCE_OPS[reduce]
    what = f"scatter_reduce at {ctx.where()}: an index is outside the dimension"
    base = x
    if not include_self:
        hit = _along(ctx, _filled("bool", x.shape, False), dim, index, True, "assign", what)
        identity = _filled(dtype, x.shape, _identity(op, dtype))
        base = TensorValue(dtype, x.shape, lambda idx: Op(
            "where", (hit.loader(idx), identity.loader(idx), x.loader(idx)), dtype))
    out = _along(ctx, base, dim, index, src, op, what)
    if reduce != "mean":
        return out
    ones = _filled(dtype, index.shape, 1)
    count = _along(ctx, _filled(dtype, x.shape, 1 if include_self else 0), dim, index, ones, "sum", what)

    def mean(idx: tuple) -> Node:
        n = count.loader(idx)
        none = Op("eq", (n, cast(Const(0, "int64"), dtype)), "bool")
        n = Op("where", (none, cast(Const(1, "int64"), dtype), n), dtype)
        return Op("div" if is_float(dtype) else "floordiv", (out.loader(idx), n), dtype)

    return TensorValue(dtype, x.shape, mean)


def _identity(op: str, dtype: str) -> bool | int | float:
    if dtype == "bool":
        return op in ("prod", "min")
    if op in ("sum", "prod"):
        return 0 if op == "sum" else 1
    if is_float(dtype):
        return float("-inf") if op == "max" else float("inf")
    info = torch.iinfo(getattr(torch, dtype))
    return info.min if op == "max" else info.max
