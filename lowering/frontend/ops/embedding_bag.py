"""EmbeddingBag: the sum, mean or max of each bag's embedding rows, bags given by offsets into one list of
indices (torch.export turns the 2-d form, fixed-size bags, into offsets from an arange).

Torch has no decomposition of it (AOTInductor calls ATen's kernel). Here each index's bag is found by a binary
search of the offsets (sort.py's, eager's bag of an index is the last offset at or before it), and the rows are
folded into their bag's output row by a scatter in index order, as eager's CPU kernel adds them.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch

from ....errors import UnsupportedError
from ...ir.dtypes import is_float
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
    bag = bag_positions(ctx, offsets, indices.shape[0])  # -1 before the first offset, `bags` past the last end

    def counted(i: Any) -> Node:
        """Whether index i falls in a bag and is not the padding index."""
        b = bag.loader((i,))
        inside = Op("logical_and", (Op("ge", (b, Const(0, "int64")), "bool"),
                                    Op("lt", (b, cast(IndexValue(bags, "int64"), "int64")), "bool")), "bool")
        if padding is None:
            return inside
        not_padding = Op("ne", (cast(indices.loader((i,)), "int64"), Const(padding, "int64")), "bool")
        return Op("logical_and", (inside, not_padding), "bool")

    def target(u: tuple) -> list[Any]:
        b = bag.loader((u[0],))
        last = Op("sub", (cast(IndexValue(bags, "int64"), "int64"), Const(1, "int64")), "int64")
        return [Op("minimum", (Op("maximum", (b, Const(0, "int64")), "int64"), last), "int64"), u[1]]

    identity = Const(float("-inf"), accumulate) if kind == "max" else Const(0.0, accumulate)

    def value(u: tuple) -> Node:
        row = cast(indirect_load(weight, [sympy.Integer(0), u[1]], 0, indices.loader((u[0],)), what, False),
                   accumulate)
        if per_sample_weights is not None:
            row = Op("mul", (row, cast(per_sample_weights.loader((u[0],)), accumulate)), accumulate)
        return Op("where", (counted(u[0]), row, identity), accumulate)

    update = (indices.shape[0], width)
    start = TensorValue(accumulate, (bags, width), lambda idx: identity)
    folded = scatter(ctx, start, update, target, value, "max" if kind == "max" else "sum",
                     what, wrap=False)
    if kind == "sum":
        result = folded
    else:
        zeros = TensorValue(accumulate, (bags, sympy.Integer(1)), lambda idx: Const(0.0, accumulate))
        count = scatter(ctx, zeros, (indices.shape[0], sympy.Integer(1)), target,  # each bag's rows, counted
                        lambda u: cast(counted(u[0]), accumulate), "sum", what, wrap=False)

        def finished(idx: tuple) -> Node:
            n = count.loader((idx[0], sympy.Integer(0)))
            empty = Op("eq", (n, Const(0.0, accumulate)), "bool")
            if kind == "max":
                return Op("where", (empty, Const(0.0, accumulate), folded.loader(idx)), accumulate)
            n = Op("where", (empty, Const(1.0, accumulate), n), accumulate)
            return Op("div", (folded.loader(idx), n), accumulate)

        result = TensorValue(accumulate, (bags, width), finished)
    output = TensorValue(dtype, out_shape, lambda idx: cast(result.loader(idx), dtype))
    return (output, *(_refused(where, name) for name in ("offset2bag", "bag_size", "max_indices")))


def _refused(where: str, name: str) -> TensorValue:
    """embedding_bag's other outputs (what autograd keeps; eager leaves some empty on its fast paths): refused if
    something reads them, naming the embedding_bag's line."""

    def refuse(idx: tuple) -> Node:
        raise UnsupportedError(f"{where}: embedding_bag's {name} output is not supported, only the bags")

    return TensorValue("int64", (sympy.Integer(0),), refuse)
