"""Reductions: sum, mean, max/min, argmax/argmin, prod, any/all, var; and the running folds (cumsum, cumprod,
cummax, cummin, logcumsumexp) as reductions over each position's prefix. Elementwise producers fuse in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch

from ...ir.dtypes import is_float
from ...ir.scalar import Const, IndexValue, Op, cast
from ...ir.symbolic import product
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue, broadcast_to

aten = OptionalOps(torch.ops.aten)
prims = OptionalOps(torch.ops.prims)


def _dims(x: TensorValue, dims: Any) -> list[int]:
    if dims is None or x.rank == 0:  # a 0-d tensor has no dims to reduce (dim 0 and -1 are allowed)
        return list(range(x.rank))
    if isinstance(dims, int):
        return [dims % max(x.rank, 1)]
    return [d % max(x.rank, 1) for d in dims] or list(range(x.rank))


def _cast_input(x: TensorValue, dtype: str) -> TensorValue:
    if x.dtype == dtype:
        return x
    return TensorValue(dtype, x.shape, lambda idx: cast(x.loader(idx), dtype))


@lowers(aten.sum.dim_IntList, aten.sum.default, prims.sum.default)
def _sum(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: Any = None, keepdim: bool = False,
         *, dtype: Any = None, **kwargs: Any) -> TensorValue:
    out = ctx.dtype_of(node)
    return ctx.reduce(_cast_input(x, out), _dims(x, dims), "sum", out, keepdim)


@lowers(aten.prod.dim_int, aten.prod.default, prims.prod.default)
def _prod(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: Any = None, keepdim: bool = False,
          *, dtype: Any = None, **kwargs: Any) -> TensorValue:
    out = ctx.dtype_of(node)
    return ctx.reduce(_cast_input(x, out), _dims(x, dims), "prod", out, keepdim)


@lowers(aten.mean.dim, aten.mean.default)
def _mean(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: Any = None, keepdim: bool = False,
          *, dtype: Any = None, **kwargs: Any) -> TensorValue:
    out = ctx.dtype_of(node)
    dims = _dims(x, dims)
    total = ctx.reduce(_cast_input(x, out), dims, "sum", out, keepdim)
    count = product([x.shape[d] for d in dims])
    return TensorValue(out, total.shape, lambda idx: Op("div", (total.loader(idx), cast(IndexValue(count, "int64"), out)), out))


@lowers(aten.amax, aten.amin, prims.amax, prims.amin, aten.max.default, aten.min.default)
def _amax(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: Any = None, keepdim: bool = False) -> TensorValue:
    name = node.target.overloadpacket.__name__
    op = "max" if name in ("amax", "max") else "min"
    return ctx.reduce(x, _dims(x, dims), op, ctx.dtype_of(node), keepdim)


@lowers(aten.argmax, aten.argmin)
def _argmax(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: Any = None, keepdim: bool = False) -> TensorValue:
    op = node.target.overloadpacket.__name__
    if dim is None:
        result = ctx.reduce(x, None, op, "int64", False)
        shape = ctx.shape_of(node)
        return broadcast_to(result, shape) if keepdim else result
    return ctx.reduce(x, [dim], op, "int64", keepdim)


@lowers(aten.max.dim, aten.min.dim)
def _max_dim(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int, keepdim: bool = False) -> tuple:
    name = node.target.overloadpacket.__name__
    values = ctx.reduce(x, [dim], name, x.dtype, keepdim)
    indices = ctx.reduce(x, [dim], "arg" + name, "int64", keepdim)
    return (values, indices)


@lowers(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims, aten.all.default)
def _any_all(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: Any = None, keepdim: bool = False) -> TensorValue:
    op = node.target.overloadpacket.__name__
    result = ctx.reduce(_cast_input(x, "bool"), _dims(x, dims), op, "bool", keepdim)
    return _cast_input(result, ctx.dtype_of(node))


@lowers(prims.var.default, aten.var.correction, aten.var.dim, aten.var.default)
def _var(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: Any = None, *args: Any, **kwargs: Any) -> TensorValue:
    """Two passes, as exact as eager's: the mean, then the sum of squared deviations from it."""
    if node.target is aten.var.default:  # var(x, unbiased=True)
        dims, correction, keepdim = None, (1 if (dims is None or dims) else 0), False
    elif node.target is aten.var.dim:
        correction, keepdim = (1 if (not args or args[0]) else 0), (args[1] if len(args) > 1 else False)
    else:
        correction = kwargs.get("correction", args[0] if args else 1)
        correction = 1 if correction is None else correction
        keepdim = kwargs.get("keepdim", False)
    out = ctx.dtype_of(node)
    dims = _dims(x, dims)
    xf = _cast_input(x, out)
    count = product([x.shape[d] for d in dims])
    total = ctx.reduce(xf, dims, "sum", out, keepdim=True)
    n = cast(IndexValue(count, "int64"), out)

    def deviation(idx: tuple) -> Any:
        mean_idx = tuple(sympy.Integer(0) if d in dims else i for d, i in enumerate(idx))
        diff = Op("sub", (xf.loader(idx), Op("div", (total.loader(mean_idx), n), out)), out)
        return Op("mul", (diff, diff), out)

    squares = ctx.reduce(TensorValue(out, x.shape, deviation), dims, "sum", out, keepdim)
    # max(N - correction, 0) in floating point: correction may be fractional.
    denom = Op("maximum", (Op("sub", (n, Const(float(correction), out)), out), Const(0.0, out)), out)
    return TensorValue(out, squares.shape, lambda idx: Op("div", (squares.loader(idx), denom), out))


@lowers(aten.cumsum.default, aten.cumprod.default)
def _cumulative(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int, *, dtype: Any = None) -> TensorValue:
    return cumulative(ctx, x, dim, "sum" if node.target is aten.cumsum.default else "prod", ctx.dtype_of(node))


def cumulative(ctx: GraphLowering, x: TensorValue, dim: int, op: str, out: str) -> TensorValue:
    """Running sum or product of x along dim in dtype `out`: out[..., j, ...] = fold over k <= j, a reduction
    over the whole dim with the tail masked out."""
    dim %= max(x.rank, 1)
    identity = 0 if op == "sum" else 1
    xf = _cast_input(x, out)
    if x.rank == 0:  # a scalar is its own running sum or product
        return xf
    full = list(x.shape) + [x.shape[dim]]  # last axis: the position k being folded in

    def masked(idx: tuple) -> Any:
        j, k = idx[dim], idx[-1]
        src = list(idx[:-1])
        src[dim] = k
        keep = Op("le", (IndexValue(k, "int64"), IndexValue(j, "int64")), "bool")
        return Op("where", (keep, xf.loader(tuple(src)), Const(identity, out)), out)

    return ctx.reduce(TensorValue(out, tuple(full), masked), [x.rank], op, out)


def _prefix(x: TensorValue, dim: int) -> tuple[tuple, Callable[[tuple], tuple[Any, tuple]]]:
    """The domain of a running fold along dim (x's shape and a last axis k over the dim) and, for an index of
    it, k clamped to the position j being computed, with x's index there. An idempotent fold (max, min) over
    x[min(k, j)] is the fold over the prefix k <= j, with no identity to mask the rest with."""
    def at(idx: tuple) -> tuple[Any, tuple]:
        k = sympy.Min(idx[-1], idx[dim])
        src = list(idx[:-1])
        src[dim] = k
        return k, tuple(src)

    return (*x.shape, x.shape[dim]), at


@lowers(aten.cummax.default, aten.cummin.default)
def _cummax(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int) -> tuple[TensorValue, TensorValue]:
    """Running max (min) along dim and where it was found, as eager's CPU kernel gives it: among equal values the
    latest, and from the first NaN on, NaN at the latest NaN."""
    if x.rank == 0:
        return x, TensorValue("int64", (), lambda idx: Const(0, "int64"))
    dim %= x.rank
    op = "max" if node.target is aten.cummax.default else "min"
    domain, at = _prefix(x, dim)
    values = ctx.reduce(TensorValue(x.dtype, domain, lambda idx: x.loader(at(idx)[1])), [x.rank], op, x.dtype)

    def found(idx: tuple) -> Any:
        k, src = at(idx)
        a, best = x.loader(src), values.loader(idx[:-1])
        same = Op("eq", (a, best), "bool")
        if is_float(x.dtype):
            both_nan = Op("logical_and", (Op("isnan", (a,), "bool"), Op("isnan", (best,), "bool")), "bool")
            same = Op("logical_or", (same, both_nan), "bool")
        return Op("where", (same, IndexValue(k, "int64"), Const(0, "int64")), "int64")

    return values, ctx.reduce(TensorValue("int64", domain, found), [x.rank], "max", "int64")


@lowers(aten.logcumsumexp.default)
def _logcumsumexp(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int) -> TensorValue:
    """log of the running sum of exp along dim, shifted by the running max so that no exp overflows: where
    that max is infinite (all -inf so far, or an inf) it is the result, as in eager."""
    out = ctx.dtype_of(node)
    compute = "float32" if out in ("float16", "bfloat16") else out
    xf = _cast_input(x, compute)
    if x.rank == 0:
        return _cast_input(xf, out)
    dim %= x.rank
    domain, at = _prefix(xf, dim)
    peak = ctx.reduce(TensorValue(compute, domain, lambda idx: xf.loader(at(idx)[1])), [x.rank], "max", compute)

    def shifted(idx: tuple) -> Any:
        k, j = idx[-1], idx[dim]
        src = list(idx[:-1])
        src[dim] = k
        term = Op("exp", (Op("sub", (xf.loader(tuple(src)), peak.loader(idx[:-1])), compute),), compute)
        inside = Op("le", (IndexValue(k, "int64"), IndexValue(j, "int64")), "bool")
        return Op("where", (inside, term, Const(0.0, compute)), compute)

    total = ctx.reduce(TensorValue(compute, domain, shifted), [x.rank], "sum", compute)

    def result(idx: tuple) -> Any:
        m = peak.loader(idx)
        value = Op("add", (m, Op("log", (total.loader(idx),), compute)), compute)
        return cast(Op("where", (Op("isinf", (m,), "bool"), m, value), compute), out)

    return TensorValue(out, x.shape, result)
