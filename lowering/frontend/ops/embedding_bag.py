"""EmbeddingBag: the sum, mean or max of each bag's embedding rows, bags given by offsets into one list of
indices.

Torch has no decomposition of it (AOTInductor calls ATen's kernel). Two forms:
- offsets that are index math, b * size (what torch.export makes of a 2-d input of fixed-size bags): each bag
  is a reduction over its own indices, parallel over bags and features;
- offsets read as data: each index's bag is found by a binary search of the offsets (sort.py's; an index's bag
  is the last offset at or before it, as in eager), and the rows are folded into their bag's output row by a
  scatter in index order, as eager's CPU kernel adds them. The number of bags is the output's (one less than
  the offsets with include_last_offset), so indices past the last bag's end fold into none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch

from ....errors import UnsupportedError
from ...ir.dtypes import is_float
from ...ir.index_math import as_index_expr
from ...ir.scalar import Const, IndexValue, Node, Op, cast
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue
from .index import addressable, indirect_load
from .scatter import scatter
from .sort import bag_positions

aten = OptionalOps(torch.ops.aten)

_MODES = {0: "sum", 1: "mean", 2: "max"}


@lowers(aten.embedding_bag.default, aten.embedding_bag.padding_idx, aten._embedding_bag.default,
        aten._embedding_bag_forward_only.default)
def _embedding_bag(ctx: GraphLowering, node: torch.fx.Node, weight: TensorValue, indices: TensorValue,
                   offsets: TensorValue, scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                   per_sample_weights: TensorValue | None = None, include_last_offset: bool = False,
                   padding_idx: int | None = None) -> tuple[TensorValue, ...]:
    """Bag b holds the indices from offsets[b] up to the next offset (the end of the list for the last bag,
    unless include_last_offset makes the last offset that end). An index equal to padding_idx adds nothing
    and is not counted in a mean; an empty bag gives zeros in every mode. Half-precision bags are summed in
    float32 and rounded once."""
    where = ctx.where()
    if indices.rank != 1 or offsets.rank != 1:
        raise UnsupportedError(f"embedding_bag at {where}: indices and offsets of ranks {indices.rank} and "
                               f"{offsets.rank} (expected the 1-d form torch.export records)")
    kind = _MODES[int(mode)]
    dtype = weight.dtype
    if not is_float(dtype):
        raise UnsupportedError(f"embedding_bag at {where}: a weight of dtype {dtype} (expected a float dtype)")
    accumulate = "float64" if dtype == "float64" else "float32"
    rows, width = weight.shape
    out_shape = ctx.shape_of(node)
    bags = out_shape[0]
    # a negative padding_idx counts from the end, as eager normalises it
    padding = None if padding_idx is None else int(padding_idx) % int(rows)

    what = f"embedding_bag at {where}: an index is outside 0..{rows}-1"
    weight = addressable(ctx, weight)
    identity = _identity(kind, accumulate)

    def kept(i: Any) -> Node:
        """Whether the i-th index is not the padding index."""
        if padding is None:
            return Const(True, "bool")
        return Op("ne", (cast(indices.loader((i,)), "int64"), Const(padding, "int64")), "bool")

    def row(i: Any, d: Any, counted: Node) -> Node:
        """Element d of the i-th index's row, times its weight; the fold's identity where it is not counted."""
        value = cast(indirect_load(weight, [sympy.Integer(0), d], 0, indices.loader((i,)), what, False), accumulate)
        if per_sample_weights is not None:
            value = Op("mul", (value, cast(per_sample_weights.loader((i,)), accumulate)), accumulate)
        return Op("where", (counted, value, identity), accumulate)

    size = _fixed_bag_size(offsets, indices.shape[0], bags)
    if size is not None:
        folded, count = _fold_fixed_bags(ctx, size, (bags, width), kept, row, kind, accumulate, padding is not None)
    else:
        folded, count = _fold_bags_by_offsets(ctx, offsets, indices.shape[0], (bags, width), kept, row, kind,
                                              accumulate, what)

    def finished(idx: tuple) -> Node:
        if count is None:
            return folded.loader(idx)
        n = count.loader((idx[0], sympy.Integer(0)))
        empty = Op("eq", (n, Const(0.0, accumulate)), "bool")
        if kind == "max":
            return Op("where", (empty, Const(0.0, accumulate), folded.loader(idx)), accumulate)
        n = Op("where", (empty, Const(1.0, accumulate), n), accumulate)
        return Op("div", (folded.loader(idx), n), accumulate)

    output = TensorValue(dtype, out_shape, lambda idx: cast(finished(idx), dtype))
    return (output, *(_refused(where, name) for name in ("offset2bag", "bag_size", "max_indices")))


def _fixed_bag_size(offsets: TensorValue, count: sympy.Expr, bags: sympy.Expr) -> sympy.Expr | None:
    """The bags' common size where the offsets are index math b * size covering all `count` indices (what
    torch.export makes of a 2-d input of fixed-size bags); None where they are data."""
    b = sympy.Symbol("p0", integer=True, nonnegative=True)
    expr = as_index_expr(offsets.loader((b,)))
    if expr is None:
        return None
    expr = sympy.expand(expr)
    size = expr.coeff(b)
    if b in size.free_symbols or sympy.expand(expr - size * b) != 0 or sympy.expand(count - size * bags) != 0:
        return None
    if not (size.is_positive or size.free_symbols):  # empty bags of size 0: the general path's zeros
        return None
    return size


def _fold_fixed_bags(ctx: GraphLowering, size: sympy.Expr, shape: tuple, kept: Callable, row: Callable, kind: str,
                     accumulate: str, padded: bool) -> tuple[TensorValue, TensorValue | None]:
    """Bags of one size: a reduction over each bag's indices (parallel over bags and features on a GPU)."""
    op = "max" if kind == "max" else "sum"
    folded = ctx.reduce(TensorValue(accumulate, (*shape, size), lambda idx: row(
        idx[0] * size + idx[2], idx[1], kept(idx[0] * size + idx[2]))), [2], op, accumulate)
    if kind == "sum":
        return folded, None
    if not padded:  # every bag holds `size` rows
        return folded, TensorValue(accumulate, (shape[0], sympy.Integer(1)),
                                   lambda idx: cast(IndexValue(size, "int64"), accumulate))
    counts = TensorValue(accumulate, (shape[0], sympy.Integer(1), size),
                         lambda idx: cast(kept(idx[0] * size + idx[2]), accumulate))
    return folded, ctx.reduce(counts, [2], "sum", accumulate)


def _fold_bags_by_offsets(ctx: GraphLowering, offsets: TensorValue, count: sympy.Expr, shape: tuple, kept: Callable,
                          row: Callable, kind: str, accumulate: str, what: str) -> tuple[TensorValue, TensorValue | None]:
    """Bags from offsets read as data: each index's bag by a binary search of the offsets, its row folded into
    the bag's by a scatter in index order (serial on a GPU: deterministic, as eager's CPU kernel is)."""
    bags, width = shape
    bag = bag_positions(ctx, offsets, count)  # -1 before the first offset, `bags` past the last bag's end
    last = Op("sub", (cast(IndexValue(bags, "int64"), "int64"), Const(1, "int64")), "int64")

    def counted(i: Any) -> Node:
        b = bag.loader((i,))
        inside = Op("logical_and", (Op("ge", (b, Const(0, "int64")), "bool"),
                                    Op("lt", (b, Op("add", (last, Const(1, "int64")), "int64")), "bool")), "bool")
        return Op("logical_and", (inside, kept(i)), "bool")

    def target(u: tuple) -> list[Any]:
        return [Op("minimum", (Op("maximum", (bag.loader((u[0],)), Const(0, "int64")), "int64"), last), "int64"), u[1]]

    start = TensorValue(accumulate, shape, lambda idx: _identity(kind, accumulate))
    folded = scatter(ctx, start, (count, width), target, lambda u: row(u[0], u[1], counted(u[0])),
                     "max" if kind == "max" else "sum", what, wrap=False)
    if kind == "sum":
        return folded, None
    zeros = TensorValue(accumulate, (bags, sympy.Integer(1)), lambda idx: Const(0.0, accumulate))
    return folded, scatter(ctx, zeros, (count, sympy.Integer(1)), target,
                           lambda u: cast(counted(u[0]), accumulate), "sum", what, wrap=False)


def _identity(kind: str, accumulate: str) -> Node:
    return Const(float("-inf"), accumulate) if kind == "max" else Const(0.0, accumulate)


def _refused(where: str, name: str) -> TensorValue:
    """embedding_bag's other outputs (what autograd keeps; eager leaves some empty on its fast paths): refused if
    something reads them, naming the embedding_bag's line."""

    def refuse(idx: tuple) -> Node:
        raise UnsupportedError(f"{where}: embedding_bag's {name} output is not supported, only the bags")

    return TensorValue("int64", (sympy.Integer(0),), refuse)
