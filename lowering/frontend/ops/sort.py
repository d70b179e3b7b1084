"""Sorting: sort (stable or not), and through it argsort, msort and topk.

A sort is a count and a scatter, so it needs no kernel of its own on either backend: an element's place in
the stable order along the dim is the number of elements that come before it (a sum reduction over the
dim), and every element is then written to its place (a ScatterKernel whose targets form a permutation).
Counting costs n^2 comparisons per sorted row, hence the limit on the length of the sorted dim.
NaN sorts as the largest value, as in eager.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch

from ....errors import UnsupportedError
from ...ir.dtypes import is_float
from ...ir.scalar import Const, IndexValue, Node, Op, cast
from ...ir.symbolic import upper_bound
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue, slice_
from .scatter import scatter

aten = OptionalOps(torch.ops.aten)

# Longest dim sorted by counting: 16384^2 comparisons take a fraction of a second on one core.
MAX_SORTED = 16384


def _precedes(a: Node, b: Node, descending: bool) -> Node:
    """Whether a strictly comes before b: a < b (a > b when descending), NaN being the largest value."""
    before = Op("gt" if descending else "lt", (a, b), "bool")
    if not is_float(a.dtype):
        return before
    first, last = (a, b) if descending else (b, a)  # the NaN one comes first descending, last ascending
    not_nan = Op("logical_not", (Op("isnan", (last,), "bool"),), "bool")
    nan_order = Op("logical_and", (Op("isnan", (first,), "bool"), not_nan), "bool")
    return Op("logical_or", (before, nan_order), "bool")


def _same(a: Node, b: Node) -> Node:
    equal = Op("eq", (a, b), "bool")
    if not is_float(a.dtype):
        return equal
    both_nan = Op("logical_and", (Op("isnan", (a,), "bool"), Op("isnan", (b,), "bool")), "bool")
    return Op("logical_or", (equal, both_nan), "bool")


def ranks(ctx: GraphLowering, x: TensorValue, dim: int, descending: bool) -> TensorValue:
    """Every element's position in the stable order along dim: how many elements come before it."""
    full = (*x.shape, x.shape[dim])  # the last axis: the element compared with

    def earlier(idx: tuple) -> Node:
        i, j = idx[dim], idx[-1]
        other = list(idx[:-1])
        other[dim] = j
        a, b = x.loader(tuple(other)), x.loader(tuple(idx[:-1]))
        earlier_position = Op("lt", (IndexValue(j, "int64"), IndexValue(i, "int64")), "bool")
        tie = Op("logical_and", (_same(a, b), earlier_position), "bool")
        return cast(Op("logical_or", (_precedes(a, b, descending), tie), "bool"), "int64")

    return ctx.reduce(TensorValue("int64", full, earlier), [x.rank], "sum", "int64")


def sort(ctx: GraphLowering, x: TensorValue, dim: int, descending: bool) -> tuple[TensorValue, TensorValue]:
    """(values, indices) of x stably sorted along dim."""
    if x.rank == 0:
        return x, TensorValue("int64", (), lambda idx: Const(0, "int64"))
    dim %= x.rank
    ranges = {s.expr: (s.min, s.max) for s in ctx.symbols}
    if upper_bound(x.shape[dim], ranges) > MAX_SORTED:
        raise UnsupportedError(f"sorting along a dim of up to {upper_bound(x.shape[dim], ranges)} elements is not "
                               f"supported (aotpack sorts by counting, at most {MAX_SORTED} elements along the dim)")
    place = ranks(ctx, x, dim, descending)

    def target(u: tuple) -> list[Any]:
        return [place.loader(u) if d == dim else u[d] for d in range(x.rank)]

    what = f"sort at {ctx.where()}: an element's place is outside the dim (an aotpack bug)"
    zeros = TensorValue(x.dtype, x.shape, lambda idx: cast(Const(0, "int64"), x.dtype))
    values = scatter(ctx, zeros, x.shape, target, x.loader, "assign", what, wrap=False)
    zeros = TensorValue("int64", x.shape, lambda idx: Const(0, "int64"))

    def position(u: tuple) -> Node:
        return IndexValue(u[dim], "int64")

    indices = scatter(ctx, zeros, x.shape, target, position, "assign", what, wrap=False)
    return values, indices


@lowers(aten.sort.default, aten.sort.stable)
def _sort(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int = -1, descending: bool = False, *,
          stable: bool | None = None) -> tuple[TensorValue, TensorValue]:
    return sort(ctx, x, dim, descending)


@lowers(aten.topk.default)
def _topk(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, k: Any, dim: int = -1, largest: bool = True,
          sorted: bool = True) -> tuple[TensorValue, TensorValue]:
    """The first k of the sorted order (unsorted topk's order is unspecified; sorted is one valid order)."""
    values, indices = sort(ctx, x, dim, largest)
    if x.rank == 0:
        return values, indices
    count = ctx.sym(k)
    return (slice_(values, dim, sympy.Integer(0), count, 1), slice_(indices, dim, sympy.Integer(0), count, 1))
