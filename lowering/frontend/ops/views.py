"""Views: ops that only change how elements are indexed. None of them moves data."""

from __future__ import annotations

from typing import Any

import sympy
import torch

from ....errors import UnsupportedError
from ...ir.kernels import StridedView
from .. import values as V
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue

aten = OptionalOps(torch.ops.aten)
prims = OptionalOps(torch.ops.prims)


def _norm_index(index: Any, size: sympy.Expr) -> sympy.Expr:
    index = sympy.sympify(index)
    return index + size if (index.is_number and index < 0) else index


@lowers(aten.view, aten._unsafe_view, aten.reshape, aten.view_copy, prims.reshape)
def _reshape(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, *args: Any) -> TensorValue:
    return V.reshape(x, ctx.shape_of(node))


@lowers(aten.permute, aten.permute_copy, prims.transpose)
def _permute(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: list[int]) -> TensorValue:
    return V.permute(x, dims)


@lowers(aten.t, aten.transpose.int, aten.numpy_T)
def _transpose(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, d0: int = 0, d1: int = 1) -> TensorValue:
    if x.rank < 2:
        return x
    dims = list(range(x.rank))
    dims[d0 % x.rank], dims[d1 % x.rank] = dims[d1 % x.rank], dims[d0 % x.rank]
    return V.permute(x, dims)


@lowers(aten.expand, aten.expand_copy, aten.broadcast_to)
def _expand(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, *args: Any, **kwargs: Any) -> TensorValue:
    return V.expand(x, ctx.shape_of(node))


@lowers(prims.broadcast_in_dim)
def _broadcast_in_dim(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, shape: Any, dims: list[int]) -> TensorValue:
    out_shape = ctx.shape_of(node)
    for d in range(len(out_shape)):
        if d not in dims:
            x = V.unsqueeze(x, d)
    return V.expand(x, out_shape)


@lowers(aten.unsqueeze, aten.unsqueeze_copy)
def _unsqueeze(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int) -> TensorValue:
    return V.unsqueeze(x, dim)


@lowers(aten.squeeze, aten.squeeze_copy, prims.squeeze)
def _squeeze(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: Any = None) -> TensorValue:
    if dims is None:
        dims = list(range(x.rank))
    elif isinstance(dims, int):
        dims = [dims]
    return V.squeeze(x, [d for d in dims if x.rank and x.shape[d % x.rank] == 1])


@lowers(aten.slice.Tensor, aten.slice_copy.Tensor)
def _slice(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int = 0, start: Any = None,
           end: Any = None, step: int = 1) -> TensorValue:
    dim %= x.rank
    out_size = ctx.shape_of(node)[dim]
    size = x.shape[dim]
    start_e = sympy.Integer(0) if start is None else _norm_index(start, size)
    if start_e.is_number:
        start_e = sympy.Max(0, sympy.Min(start_e, size)) if not size.is_number else sympy.Integer(max(0, min(int(start_e), int(size))))
    if not isinstance(step, int) or step < 1:
        raise UnsupportedError(f"slice step {step} is not supported (positive integers only)")
    return V.slice_(x, dim, sympy.simplify(start_e), out_size, step)


@lowers(aten.select.int, aten.select_copy.int)
def _select(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int, index: Any) -> TensorValue:
    return V.select(x, dim, _norm_index(index, x.shape[dim % x.rank]))


@lowers(aten.split_with_sizes, aten.split.Tensor, aten.split_with_sizes_copy, aten.split_copy.Tensor)
def _split(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, sizes: Any, dim: int = 0) -> list[TensorValue]:
    dim %= x.rank
    parts = []
    start: sympy.Expr = sympy.Integer(0)
    for meta in node.meta["val"]:
        size = ctx.sym(meta.shape[dim])
        parts.append(V.slice_(x, dim, start, size, 1))
        start = start + size
    return parts


@lowers(aten.unbind.int, aten.unbind_copy.int)
def _unbind(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dim: int = 0) -> list[TensorValue]:
    count = x.shape[dim % x.rank]
    if not count.is_number:
        raise UnsupportedError("unbind along a dynamic dimension gives a dynamic number of outputs")
    return [V.select(x, dim, sympy.Integer(i)) for i in range(int(count))]


@lowers(aten.as_strided, aten.as_strided_copy)
def _as_strided(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, size: Any, stride: Any,
                storage_offset: Any = None) -> TensorValue:
    # Strides are relative to the underlying storage, which is only known for a contiguous buffer.
    if not V.is_contiguous(x) or x.view.offset != 0:
        x = V.from_buffer(ctx.as_view(x).buffer, x.dtype, x.shape) if x.view is None else x
        if not V.is_contiguous(x) or x.view.offset != 0:
            raise UnsupportedError("as_strided on a view of another tensor is not supported")
    strides = tuple(ctx.sym(s) for s in stride)
    offset = ctx.sym(storage_offset or 0)
    return V.from_view(StridedView(x.view.buffer, offset, strides), x.dtype, ctx.shape_of(node))


@lowers(aten.flip)
def _flip(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, dims: list[int]) -> TensorValue:
    flipped = {d % x.rank for d in dims}

    def load(idx: tuple) -> Any:
        return x.loader(tuple(x.shape[d] - 1 - i if d in flipped else i for d, i in enumerate(idx)))

    return TensorValue(x.dtype, x.shape, load)
