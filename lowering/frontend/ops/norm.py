"""Batch norm over the batch's own statistics (training mode without running stats; instance norm is this
over a [1, N*C, ...] view): per channel, the mean and the biased variance over every other dim."""

from __future__ import annotations

from typing import Any

import torch

from ...ir.scalar import Const, IndexValue, Node, Op, cast
from ...ir.symbolic import product
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue

aten = OptionalOps(torch.ops.aten)


@lowers(aten._native_batch_norm_legit.no_stats)
def _batch_norm_batch_stats(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, weight: Any, bias: Any,
                            training: bool, momentum: float, eps: float) -> tuple:
    """(normalised x, mean, 1 / sqrt(variance + eps)); the variance from the centred values, not E[x²] - E[x]²,
    which cancels badly when the mean is large."""
    out = ctx.dtype_of(node)
    dims = [d for d in range(x.rank) if d != 1]
    count = cast(IndexValue(product([x.shape[d] for d in dims]), "int64"), out)
    xf = TensorValue(out, x.shape, lambda idx: cast(x.loader(idx), out))
    total = ctx.reduce(xf, dims, "sum", out)
    mean = ctx.realize(TensorValue(out, total.shape, lambda c: Op("div", (total.loader(c), count), out)))

    def squared(idx: tuple) -> Node:
        d = Op("sub", (xf.loader(idx), mean.loader((idx[1],))), out)
        return Op("mul", (d, d), out)

    squares = ctx.reduce(TensorValue(out, x.shape, squared), dims, "sum", out)
    invstd = ctx.realize(TensorValue(out, total.shape, lambda c: Op("rsqrt", (Op("add", (
        Op("div", (squares.loader(c), count), out), Const(float(eps), out)), out),), out)))

    def normalised(idx: tuple) -> Node:
        c = (idx[1],)
        y = Op("mul", (Op("sub", (xf.loader(idx), mean.loader(c)), out), invstd.loader(c)), out)
        if weight is not None:
            y = Op("mul", (y, cast(weight.loader(c), out)), out)
        if bias is not None:
            y = Op("add", (y, cast(bias.loader(c), out)), out)
        return y

    return (TensorValue(out, x.shape, normalised), mean, invstd)
