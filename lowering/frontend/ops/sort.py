"""Order along a dim: sort (stable or not), and through it argsort, msort and topk; the k-th value and the
median (kthvalue, median, nanmedian); and the search of a sorted sequence (searchsorted, bucketize).

A sort is a count and a scatter, so it needs no kernel of its own on either backend: an element's place in
the stable order along the dim is the number of elements that come before it (a sum reduction over the
dim), and every element is then written to its place (a ScatterKernel whose targets form a permutation).
Counting costs n^2 comparisons per sorted row, hence the limit on the length of the sorted dim.
NaN sorts as the largest value, as in eager. The k-th value needs no scatter: it is the one element whose
place is k - 1, picked by a reduction over the dim. A search is a count too: the position of a value in a
sorted sequence is the number of the sequence's elements before it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv

from ....errors import UnsupportedError
from ...ir.dtypes import is_float
from ...ir.scalar import Const, IndexValue, Node, Op, cast
from ...ir.symbolic import product, upper_bound
from .. import values as V
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue, slice_
from .index import addressable, indirect_load
from .pointwise import promoted_dtype, scalar_node
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
    ranges = {s.expr: (s.min, s.max) for s in ctx.symbols}
    if upper_bound(x.shape[dim], ranges) > MAX_SORTED:
        raise UnsupportedError(f"sorting along a dim of up to {upper_bound(x.shape[dim], ranges)} elements is not "
                               f"supported (aotpack sorts by counting, at most {MAX_SORTED} elements along the dim)")
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


def _at_place(ctx: GraphLowering, x: TensorValue, dim: int, place: Callable[[tuple], Node],
              keepdim: bool) -> tuple[TensorValue, TensorValue]:
    """(value, index) of the element at `place` (a function of an index of x; the same along dim) of the stable
    ascending order along dim: a sum over the dim where only that element is kept, so exact in any dtype."""
    rank = ranks(ctx, x, dim, descending=False)
    summed = "int64" if x.dtype == "bool" else x.dtype
    nothing = Const(-0.0, "float64") if is_float(x.dtype) else Const(0, "int64")  # x + -0.0 is x, -0.0 too

    def chosen(idx: tuple) -> Node:
        return Op("eq", (rank.loader(idx), place(idx)), "bool")

    def value(idx: tuple) -> Node:
        return Op("where", (chosen(idx), cast(x.loader(idx), summed), cast(nothing, summed)), summed)

    def position(idx: tuple) -> Node:
        return Op("where", (chosen(idx), IndexValue(idx[dim], "int64"), Const(0, "int64")), "int64")

    values = ctx.reduce(TensorValue(summed, x.shape, value), [dim], "sum", summed, keepdim)
    if summed != x.dtype:
        values = TensorValue(x.dtype, values.shape, lambda idx: cast(values.loader(idx), x.dtype))
    return values, ctx.reduce(TensorValue("int64", x.shape, position), [dim], "sum", "int64", keepdim)


def _nan_count(ctx: GraphLowering, x: TensorValue, dim: int) -> TensorValue:
    """NaNs along dim, the dim kept with size 1."""
    def nan(idx: tuple) -> Node:
        return cast(Op("isnan", (x.loader(idx),), "bool"), "int64")

    return ctx.reduce(TensorValue("int64", x.shape, nan), [dim], "sum", "int64", keepdim=True)


def _median(ctx: GraphLowering, x: TensorValue, dim: int, keepdim: bool, ignore_nan: bool) -> tuple[TensorValue, TensorValue]:
    """The lower median along dim, as eager gives it: with a NaN in the row, the first NaN (median) or the
    median of the others (nanmedian; the first NaN again where all are NaN). Among equal values the index is
    the stable order's, as in kthvalue."""
    if x.rank == 0:
        return x, TensorValue("int64", (), lambda idx: Const(0, "int64"))
    dim %= x.rank
    n = IndexValue(x.shape[dim], "int64")
    middle = IndexValue(FloorDiv(x.shape[dim] - 1, 2), "int64")
    if not is_float(x.dtype):
        return _at_place(ctx, x, dim, lambda idx: middle, keepdim)
    nans = _nan_count(ctx, x, dim)

    def place(idx: tuple) -> Node:
        count = nans.loader(tuple(sympy.Integer(0) if d == dim else i for d, i in enumerate(idx)))
        numbers = Op("sub", (n, count), "int64")  # the NaNs sort last, in their order in the row
        some_nan = Op("gt", (count, Const(0, "int64")), "bool")
        if ignore_nan:
            some = Op("gt", (numbers, Const(0, "int64")), "bool")
            below = Op("sub", (numbers, Const(1, "int64")), "int64")
            return Op("where", (some, Op("floordiv", (below, Const(2, "int64")), "int64"), Const(0, "int64")), "int64")
        return Op("where", (some_nan, numbers, middle), "int64")

    return _at_place(ctx, x, dim, place, keepdim)


def _flattened(x: TensorValue) -> TensorValue:
    return V.reshape(x, [product(x.shape)]) if x.rank != 1 else x


@lowers(aten.kthvalue.default)
def _kthvalue(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, k: Any, dim: int = -1,
              keepdim: bool = False) -> tuple[TensorValue, TensorValue]:
    """The k-th smallest along dim and its index: among equal values the k-th of the stable order (eager's
    index among ties is whichever its selection algorithm leaves there, unspecified)."""
    if x.rank == 0:
        return x, TensorValue("int64", (), lambda idx: Const(0, "int64"))
    place = IndexValue(ctx.sym(k) - 1, "int64")
    return _at_place(ctx, x, dim % x.rank, lambda idx: place, keepdim)


@lowers(aten.median.dim, aten.nanmedian.dim)
def _median_dim(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int = -1,
                keepdim: bool = False) -> tuple[TensorValue, TensorValue]:
    return _median(ctx, x, dim, keepdim, ignore_nan=node.target is aten.nanmedian.dim)


@lowers(aten.median.default, aten.nanmedian.default)
def _median_all(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue) -> TensorValue:
    values, _ = _median(ctx, _flattened(x), 0, False, ignore_nan=node.target is aten.nanmedian.default)
    return values


# A binary search step's state (start, end) is read about seven times by the next step's expression, and
# expressions are trees that are hashed whole: the state is stored every few steps to keep each kernel's small.
SEARCH_STEPS_PER_KERNEL = 3
_HALF = 32  # the state is one int64: start in the high 32 bits, end in the low 32


def _search(ctx: GraphLowering, sequence: TensorValue, values: Any, out_int32: bool, right: bool,
            sorter: TensorValue | None) -> TensorValue:
    """Each value's position in a sorted sequence along its last dim (a 1-d sequence serves every value; else
    its leading dims pair with the values'), by eager's own binary search, probe for probe: while start < end,
    mid = (start + end) // 2 moves start past mid where not (s[mid] >= v) (not (s[mid] > v) for right), else
    end to mid. So a NaN value lands past the end, and a sequence that is not sorted (verification's random
    inputs) gives what eager gives. It runs every probe a sequence of the declared maximum length needs."""
    compute = promoted_dtype([sequence, values])
    # probes read them at positions from data: a sequence computed from its own positions (an arange) is stored
    sequence = addressable(ctx, sequence)
    sorter = None if sorter is None else addressable(ctx, sorter)
    if not isinstance(values, TensorValue):  # searchsorted.Scalar, bucketize.Scalar: a 0-d result
        values = TensorValue(compute, (), lambda idx, number=values: scalar_node(number, compute))
    ranges = {s.expr: (s.min, s.max) for s in ctx.symbols}
    longest = upper_bound(sequence.shape[-1], ranges)
    if longest >= 2**31:
        raise UnsupportedError(f"searchsorted at {ctx.where()}: a sequence of up to {longest} elements is not "
                               "supported (at most 2**31 - 1)")
    length = IndexValue(sequence.shape[-1], "int64")
    last = Op("sub", (length, Const(1, "int64")), "int64")
    what = f"searchsorted at {ctx.where()}: a sorter index is outside the sequence"

    def i64(name: str, *args: Node) -> Node:
        return Op(name, args, "int64")

    def step(idx: tuple, start: Node, end: Node) -> tuple[Node, Node]:
        lead = list(idx[: sequence.rank - 1]) if sequence.rank > 1 else []
        active = Op("lt", (start, end), "bool")
        if isinstance(start, IndexValue) and isinstance(end, IndexValue):  # the first probe, the same for all
            middle = start.expr + FloorDiv(end.expr - start.expr, 2)
            mid, at = IndexValue(middle, "int64"), (*lead, sympy.Min(middle, sequence.shape[-1] - 1))
            element = (sequence.loader(at) if sorter is None else
                       indirect_load(sequence, [*lead, sympy.Integer(0)], sequence.rank - 1, sorter.loader(at), what,
                                     wrap=False))
        else:
            mid = i64("add", start, i64("rshift", i64("sub", end, start), Const(1, "int64")))
            probe = i64("minimum", mid, last)  # past the end only once the search is over: read in range anyway
            if sorter is not None:
                probe = indirect_load(sorter, [*lead, sympy.Integer(0)], sequence.rank - 1, probe, what, wrap=False)
            element = indirect_load(sequence, [*lead, sympy.Integer(0)], sequence.rank - 1, probe, what, wrap=False)
        stops = Op("gt" if right else "ge", (cast(element, compute), cast(values.loader(idx), compute)), "bool")
        onwards = Op("logical_and", (active, Op("logical_not", (stops,), "bool")), "bool")
        back = Op("logical_and", (active, stops), "bool")
        return (Op("where", (onwards, i64("add", mid, Const(1, "int64")), start), "int64"),
                Op("where", (back, mid, end), "int64"))

    def packed(start: Node, end: Node) -> Node:
        return i64("bitwise_or", i64("lshift", start, Const(_HALF, "int64")), end)

    state = None  # before the first kernel: start 0, end the length, as index math
    for first in range(0, max(int(longest).bit_length(), 1), SEARCH_STEPS_PER_KERNEL):
        steps = min(SEARCH_STEPS_PER_KERNEL, int(longest).bit_length() - first)

        def advanced(idx: tuple, before: TensorValue | None = state, steps: int = steps) -> Node:
            if before is None:
                start, end = IndexValue(sympy.Integer(0), "int64"), length
            else:
                bits = before.loader(idx)
                start = i64("rshift", bits, Const(_HALF, "int64"))
                end = i64("bitwise_and", bits, Const(2**_HALF - 1, "int64"))
            for _ in range(steps):
                start, end = step(idx, start, end)
            return packed(start, end)

        state = ctx.realize(TensorValue("int64", values.shape, advanced))
    out = "int32" if out_int32 else "int64"
    return TensorValue(out, values.shape, lambda idx: cast(i64("rshift", state.loader(idx), Const(_HALF, "int64")), out))


def bag_positions(ctx: GraphLowering, offsets: TensorValue, count: sympy.Expr) -> TensorValue:
    """For each position i < count, the last b with offsets[b] <= i (offsets sorted, as bags' starts are):
    -1 before the first offset. Stored, since it is read as a position."""
    positions = TensorValue("int64", (count,), lambda idx: IndexValue(idx[0], "int64"))
    found = _search(ctx, offsets, positions, out_int32=False, right=True, sorter=None)
    return ctx.realize(TensorValue("int64", (count,), lambda idx: Op("sub", (found.loader(idx), Const(1, "int64")),
                                                                        "int64")))


@lowers(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def _searchsorted(ctx: GraphLowering, node: torch.fx.Node, sequence: TensorValue, values: Any, *,
                  out_int32: bool = False, right: bool = False, side: str | None = None,
                  sorter: TensorValue | None = None) -> TensorValue:
    return _search(ctx, sequence, values, out_int32, right or side == "right", sorter)


@lowers(aten.bucketize.Tensor, aten.bucketize.Scalar)
def _bucketize(ctx: GraphLowering, node: torch.fx.Node, values: Any, boundaries: TensorValue, *,
               out_int32: bool = False, right: bool = False) -> TensorValue:
    return _search(ctx, boundaries, values, out_int32, right, None)
