"""Matmul and convolution: template kernels reading strided views of buffers."""

from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch

from ..errors import UnsupportedError
from . import values as V
from .graph import GraphLowering
from .ir import ConvKernel, MatmulKernel, StridedView
from .prepack import PANEL, can_prepack, pack_panels
from .registry import OptionalOps, lowers
from .values import TensorValue

aten = OptionalOps(torch.ops.aten)


def _batched_view(ctx: GraphLowering, x: TensorValue) -> StridedView:
    """A [batch, rows, cols] view of a 2-D or 3-D operand (batch stride 0 for 2-D)."""
    view = ctx.as_view(x)
    if x.rank == 2:
        return StridedView(view.buffer, view.offset, (sympy.Integer(0),) + view.strides)
    return view


def matmul(ctx: GraphLowering, node: torch.fx.Node, a: TensorValue, b: TensorValue) -> TensorValue:
    out_dtype = ctx.dtype_of(node)
    shape = ctx.shape_of(node)
    if a.dtype != b.dtype:
        raise UnsupportedError(f"matmul of {a.dtype} and {b.dtype}: both operands must have the same dtype")
    batch = a.shape[0] if a.rank == 3 else sympy.Integer(1)
    out = ctx.new_buffer(out_dtype, shape)
    kernel = MatmulKernel(
        output=out, a=_batched_view(ctx, a), b=_batched_view(ctx, b), batch=batch,
        m=a.shape[-2], n=b.shape[-1], k=a.shape[-1], dtype=out_dtype,
    )
    b_buffer = ctx.buffers[kernel.b.buffer]
    if can_prepack(kernel, b_buffer.dtype, b_buffer.kind):
        k, n = int(kernel.k), int(kernel.n)
        packed = pack_panels(ctx.weights[b_buffer.source], kernel.b, k, n)
        name = ctx.weight(packed, f"{b_buffer.source}.panels{PANEL}")
        kernel = dataclasses.replace(kernel, b=StridedView(name, sympy.Integer(0), (sympy.Integer(0),) * 3),
                                     b_packed=True, b_source=kernel.b)
    ctx.add_step(kernel)
    return V.from_buffer(out, out_dtype, shape)


@lowers(aten.mm.default, aten.bmm.default)
def _mm(ctx: GraphLowering, node: torch.fx.Node, a: TensorValue, b: TensorValue) -> TensorValue:
    return matmul(ctx, node, a, b)


@lowers(aten.addmm.default)
def _addmm(ctx: GraphLowering, node: torch.fx.Node, bias: TensorValue, a: TensorValue, b: TensorValue,
           *, beta: Any = 1, alpha: Any = 1) -> TensorValue:
    from .ops_pointwise import elementwise
    from .scalar import Const, Op

    product = matmul(ctx, node, a, b)

    def fn(p: Any, c: Any) -> Any:
        if alpha != 1:
            p = Op("mul", (p, Const(float(alpha), p.dtype)), p.dtype)
        if beta != 1:
            c = Op("mul", (c, Const(float(beta), c.dtype)), c.dtype)
        return Op("add", (p, c), p.dtype)

    return elementwise(ctx, node, [product, bias], fn)


def _pair(value: Any, rank: int) -> tuple[int, int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    values = values * rank if len(values) == 1 else values
    return (1, int(values[0])) if rank == 1 else (int(values[0]), int(values[1]))


@lowers(aten.convolution.default)
def _convolution(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, weight: TensorValue, bias: Any,
                 stride: Any, padding: Any, dilation: Any, transposed: bool, output_padding: Any,
                 groups: int) -> TensorValue:
    spatial = x.rank - 2
    if transposed:
        raise UnsupportedError("transposed convolution (ConvTranspose) is not supported yet")
    if spatial not in (1, 2):
        raise UnsupportedError(f"{spatial}-d convolution is not supported (1-d and 2-d are)")
    if any(not s.is_number for s in weight.shape):
        raise UnsupportedError("a convolution weight must have a fixed shape")
    out_dtype = ctx.dtype_of(node)
    out_shape = ctx.shape_of(node)
    if spatial == 1:  # run 1-d as 2-d with a height of 1
        x = V.unsqueeze(x, 2)
        weight = V.unsqueeze(weight, 2)
    w_view = ctx.as_view(weight)
    if not V.is_contiguous(V.from_view(w_view, weight.dtype, weight.shape)) or w_view.offset != 0:
        w_view = ctx.realize(weight).view
    bias_buffer = None
    if bias is not None:
        b = bias if V.is_contiguous(bias) and bias.view.offset == 0 else ctx.realize(bias)
        bias_buffer = b.view.buffer
    n, c_in, h, w = x.shape
    c_out, _, kh, kw = (int(s) for s in weight.shape)
    stride2, padding2, dilation2 = _pair(stride, spatial), _pair(padding, spatial), _pair(dilation, spatial)
    if spatial == 1:
        padding2 = (0, padding2[1])
    out_h = sympy.Integer(1) if spatial == 1 else out_shape[2]
    out_w = out_shape[-1]
    out = ctx.new_buffer(out_dtype, out_shape)
    ctx.add_step(ConvKernel(
        output=out, x=ctx.as_view(x), weight=w_view.buffer, bias=bias_buffer, n=n, c_in=c_in, h=h, w=w,
        c_out=c_out, kh=kh, kw=kw, out_h=out_h, out_w=out_w, stride=stride2, padding=padding2,
        dilation=dilation2, groups=int(groups), dtype=out_dtype,
    ))
    return V.from_buffer(out, out_dtype, out_shape)
