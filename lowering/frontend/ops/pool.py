"""Pooling as small fixed windows unrolled into an elementwise expression (fuses with its neighbours);
windows too large to unroll (max pooling's, adaptive pooling's) as a reduction over the largest window.

Window reads use clamped indices and a select, like padding, so they never leave the input.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import CeilDiv, FloorDiv

from ....errors import UnsupportedError
from ...ir.dtypes import is_float
from ...ir.scalar import Const, IndexValue, Node, Op, cast
from ...ir.symbolic import upper_bound
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue, reshape
from .reduce import _mean
from .scatter import scatter

aten = OptionalOps(torch.ops.aten)

# Windows with more elements than this are not unrolled (they would make huge kernels).
MAX_WINDOW = 64


def _pair(v: Any) -> tuple[int, int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (int(v[0]), int(v[-1])) if v else (0, 0)


def _inside(i: sympy.Expr, size: sympy.Expr) -> Node:
    ge = Op("ge", (IndexValue(i, "int64"), Const(0, "int64")), "bool")
    lt = Op("lt", (IndexValue(i, "int64"), IndexValue(size, "int64")), "bool")
    return Op("logical_and", (ge, lt), "bool")


def _clamped(i: sympy.Expr, size: sympy.Expr) -> sympy.Expr:
    return sympy.Max(0, sympy.Min(i, size - 1))


def _once(ctx: GraphLowering, x: TensorValue, kernel: tuple[int, int], stride: tuple[int, int]) -> TensorValue:
    """Overlapping windows read each input element several times: compute a lazy input once, in memory."""
    overlapping = kernel[0] > stride[0] or kernel[1] > stride[1]
    return ctx.realize(x) if overlapping and x.view is None else x


def _always_inside(padding: tuple[int, int], ceil_mode: bool) -> bool:
    """Without padding and ceil mode, the last window ends at or before the input's last element, so window
    reads need no clamp or select: their loads stay affine in the output index and vectorise."""
    return padding == (0, 0) and not ceil_mode


def _window_loads(x: TensorValue, idx: tuple, kernel: tuple[int, int], stride: tuple[int, int],
                  padding: tuple[int, int], dilation: tuple[int, int], ceil_mode: bool) -> list[tuple[Node | None, Node]]:
    """(inside?, value) for every window position of output index idx (N, C, oh, ow); inside? is None
    where the position is always inside the input."""
    exact = _always_inside(padding, ceil_mode)
    return [_window_element(x, idx, sympy.Integer(a), sympy.Integer(b), stride, padding, dilation, exact)
            for a in range(kernel[0]) for b in range(kernel[1])]


def _window_element(x: TensorValue, idx: tuple, a: sympy.Expr, b: sympy.Expr, stride: tuple[int, int],
                    padding: tuple[int, int], dilation: tuple[int, int], exact: bool) -> tuple[Node | None, Node]:
    """(inside?, value) of window position (a, b) of output index idx (N, C, oh, ow)."""
    h, w = x.shape[-2], x.shape[-1]
    hi = idx[-2] * stride[0] - padding[0] + a * dilation[0]
    wi = idx[-1] * stride[1] - padding[1] + b * dilation[1]
    if exact:
        return None, x.loader(tuple(idx[:-2]) + (hi, wi))
    value = x.loader(tuple(idx[:-2]) + (_clamped(hi, h), _clamped(wi, w)))
    return Op("logical_and", (_inside(hi, h), _inside(wi, w)), "bool"), value


@lowers(aten.max_pool2d_with_indices.default)
def _max_pool2d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, kernel_size: Any, stride: Any = None,
                padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> tuple:
    kernel = _pair(kernel_size)
    stride2 = _pair(stride) if stride else kernel
    x = _once(ctx, x, kernel, stride2)
    out_shape = ctx.shape_of(node)
    lowest = _lowest(x.dtype)
    if kernel[0] * kernel[1] > MAX_WINDOW:
        return _max_pool_reduced(ctx, x, out_shape, kernel, stride2, _pair(padding), _pair(dilation), ceil_mode,
                                 lowest)

    def load(idx: tuple) -> Node:
        best: Node | None = None
        for inside, value in _window_loads(x, idx, kernel, stride2, _pair(padding), _pair(dilation), ceil_mode):
            value = value if inside is None else Op("where", (inside, value, lowest), x.dtype)
            best = value if best is None else Op("maximum", (best, value), x.dtype)
        return best

    def argmax(idx: tuple) -> Node:
        """The flat h * W + w position of the maximum, picked as eager's CPU kernel does: the first largest
        element, or the last NaN; the window's first element inside the input if all are -inf."""
        loads = _window_loads(x, idx, kernel, stride2, _pair(padding), _pair(dilation), ceil_mode)
        positions = []
        for a in range(kernel[0]):
            for b in range(kernel[1]):
                hi = idx[-2] * stride2[0] - _pair(padding)[0] + a * _pair(dilation)[0]
                wi = idx[-1] * stride2[1] - _pair(padding)[1] + b * _pair(dilation)[1]
                positions.append(IndexValue(hi * x.shape[-1] + wi, "int64"))
        first = positions[-1]
        for (inside, _), position in reversed(list(zip(loads, positions))):
            first = position if inside is None else Op("where", (inside, position, first), "int64")
        best, where = lowest, first
        for (inside, value), position in zip(loads, positions):
            larger = Op("gt", (value, best), "bool")
            if is_float(x.dtype):
                larger = Op("logical_or", (larger, Op("isnan", (value,), "bool")), "bool")
            if inside is not None:
                larger = Op("logical_and", (inside, larger), "bool")
            best = Op("where", (larger, value, best), x.dtype)
            where = Op("where", (larger, position, where), "int64")
        return where

    return (TensorValue(x.dtype, out_shape, load), TensorValue("int64", out_shape, argmax))


def _max_pool_reduced(ctx: GraphLowering, x: TensorValue, out_shape: tuple, kernel: tuple[int, int],
                      stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int], ceil_mode: bool,
                      lowest: Node) -> tuple:
    """Windows too large to unroll (YOLO's spatial pyramid pooling, 13 x 13) as a max over the window's rows and
    columns, a reduction. The indices are refused where they are read: eager's choice among ties and NaNs
    (ops above) is not what an argmax reduction picks."""
    exact = _always_inside(padding, ceil_mode)
    lead = len(out_shape) - 2

    def element(idx: tuple) -> Node:
        inside, value = _window_element(x, tuple(idx[:lead + 2]), idx[-2], idx[-1], stride, padding, dilation, exact)
        return value if inside is None else Op("where", (inside, value, lowest), x.dtype)

    values = ctx.reduce(TensorValue(x.dtype, (*out_shape, *kernel), element), [-2, -1], "max", x.dtype)
    what = f"max pooling windows above {MAX_WINDOW} elements ({kernel[0]}x{kernel[1]})"
    return values, _refused_indices(ctx, out_shape, what, "or with smaller windows")


def _lowest(dtype: str) -> Node:
    """What a max starts from: -inf, or an integer type's minimum."""
    if dtype in ("int64", "int32", "int16", "int8", "uint8"):
        return Const(torch.iinfo(getattr(torch, dtype)).min, dtype)
    return cast(Const(float("-inf"), "float64"), dtype)


def _refused_indices(ctx: GraphLowering, shape: tuple, what: str, alternative: str = "") -> TensorValue:
    """Indices of a max that a reduction computes: an argmax reduction does not pick among ties and NaNs as
    eager's pooling does, so they are refused when something reads them, naming the pooling's line (they are
    read lazily: the reader's line would be named otherwise)."""
    where = ctx.where()

    def refuse(idx: tuple) -> Node:
        raise UnsupportedError(f"{where}: the indices of {what} are not supported, only the pooled values; pool "
                               f"without return_indices{', ' + alternative if alternative else ''}")

    return TensorValue("int64", shape, refuse)


@lowers(aten.avg_pool2d.default)
def _avg_pool2d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, kernel_size: Any, stride: Any = None,
                padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                divisor_override: Any = None) -> TensorValue:
    kernel = _pair(kernel_size)
    stride2 = _pair(stride) if stride else kernel
    x = _once(ctx, x, kernel, stride2)
    pad = _pair(padding)
    if kernel[0] * kernel[1] > MAX_WINDOW:
        raise UnsupportedError(f"average pooling windows above {MAX_WINDOW} elements are not supported")
    out_shape = ctx.shape_of(node)
    h, w = x.shape[-2], x.shape[-1]
    acc = "float64" if x.dtype == "float64" else "float32"

    def load(idx: tuple) -> Node:
        total: Node | None = None
        for inside, value in _window_loads(x, idx, kernel, stride2, pad, (1, 1), ceil_mode):
            value = cast(value, acc) if inside is None else Op("where", (inside, cast(value, acc), Const(0.0, acc)), acc)
            total = value if total is None else Op("add", (total, value), acc)
        if divisor_override:
            divisor: Node = Const(float(divisor_override), acc)
        elif _always_inside(pad, ceil_mode):
            divisor = Const(float(kernel[0] * kernel[1]), acc)
        else:
            # Same window arithmetic as ATen: clipped to the padded input, then (optionally) to the input.
            hs, ws = idx[-2] * stride2[0] - pad[0], idx[-1] * stride2[1] - pad[1]
            he, we = sympy.Min(hs + kernel[0], h + pad[0]), sympy.Min(ws + kernel[1], w + pad[1])
            if not count_include_pad:
                hs, ws, he, we = sympy.Max(hs, 0), sympy.Max(ws, 0), sympy.Min(he, h), sympy.Min(we, w)
            divisor = cast(IndexValue((he - hs) * (we - ws), "int64"), acc)
        return cast(Op("div", (total, divisor), acc), x.dtype)

    return TensorValue(x.dtype, out_shape, load)


def _adaptive_bounds(x: TensorValue, out: tuple[int, int], i: sympy.Expr, j: sympy.Expr) -> tuple[sympy.Expr, ...]:
    """Output (i, j)'s window in adaptive pooling to `out`: rows hs..he-1 and columns ws..we-1 of the input, as
    ATen computes them."""
    (h, w), (oh, ow) = x.shape[-2:], out
    return FloorDiv(i * h, oh), CeilDiv((i + 1) * h, oh), FloorDiv(j * w, ow), CeilDiv((j + 1) * w, ow)


def _adaptive_window(ctx: GraphLowering, x: TensorValue, out: tuple[int, int]) -> tuple[int, ...]:
    """The largest window of adaptive pooling to `out` over the declared ranges."""
    ranges = {s.expr: (s.min, s.max) for s in ctx.symbols}
    return tuple(upper_bound(CeilDiv(size, o) + 1, ranges) for size, o in zip(x.shape[-2:], out))


def _adaptive_element(x: TensorValue, out: tuple[int, int], lead: tuple, i: sympy.Expr, j: sympy.Expr,
                      a: sympy.Expr, b: sympy.Expr, dtype: str, outside: Node) -> Node:
    """Element (a, b) from the corner of output (i, j)'s window, in `dtype`, or `outside` past the window's end
    (windows differ in size)."""
    h, w = x.shape[-2], x.shape[-1]
    hs, he, ws, we = _adaptive_bounds(x, out, i, j)
    hi, wi = hs + a, ws + b
    inside = Op("logical_and", (Op("lt", (IndexValue(hi, "int64"), IndexValue(he, "int64")), "bool"),
                                Op("lt", (IndexValue(wi, "int64"), IndexValue(we, "int64")), "bool")), "bool")
    value = cast(x.loader((*lead, _clamped(hi, h), _clamped(wi, w))), dtype)
    return Op("where", (inside, value, outside), dtype)


@lowers(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, output_size: Any) -> TensorValue:
    out = _pair(output_size)
    if out == (1, 1):
        return _mean(ctx, node, x, [-2, -1], True)
    window = _adaptive_window(ctx, x, out)
    acc = "float64" if x.dtype == "float64" else "float32"
    zero = Const(0.0, acc)

    def mean(idx: tuple, total: Node) -> Node:
        hs, he, ws, we = _adaptive_bounds(x, out, idx[-2], idx[-1])
        return cast(Op("div", (total, cast(IndexValue((he - hs) * (we - ws), "int64"), acc)), acc), x.dtype)

    out_shape = ctx.shape_of(node)
    lead = len(out_shape) - 2
    if window[0] * window[1] > MAX_WINDOW:
        # Windows too large to unroll (VGG's pooling to 7 x 7 of images up to 448 pixels: windows of 65 x 65)
        # are a sum over the largest window's rows and columns, masked past each window's end, into a buffer.
        windows = TensorValue(acc, (*out_shape, *window),
                              lambda idx: _adaptive_element(x, out, tuple(idx[:lead]), *idx[lead:], acc, zero))
        sums = ctx.reduce(windows, [-2, -1], "sum", acc)
        return TensorValue(x.dtype, out_shape, lambda idx: mean(idx, sums.loader(idx)))

    def load(idx: tuple) -> Node:
        total: Node | None = None
        for a in range(window[0]):
            for b in range(window[1]):
                value = _adaptive_element(x, out, tuple(idx[:lead]), idx[-2], idx[-1], sympy.Integer(a),
                                          sympy.Integer(b), acc, zero)
                total = value if total is None else Op("add", (total, value), acc)
        return mean(idx, total)

    return TensorValue(x.dtype, out_shape, load)


@lowers(aten.adaptive_max_pool2d.default)
def _adaptive_max_pool2d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, output_size: Any) -> tuple:
    """The max over each window (fastai's concat pooling, spatial pyramid pooling), as a reduction over the
    largest window, masked past each window's end. The indices are refused where they are read, as for max
    pooling's large windows."""
    out = _pair(output_size)
    out_shape = ctx.shape_of(node)
    lead = len(out_shape) - 2
    lowest = _lowest(x.dtype)
    windows = TensorValue(x.dtype, (*out_shape, *_adaptive_window(ctx, x, out)),
                          lambda idx: _adaptive_element(x, out, tuple(idx[:lead]), *idx[lead:], x.dtype, lowest))
    return ctx.reduce(windows, [-2, -1], "max", x.dtype), _refused_indices(ctx, out_shape, "adaptive max pooling")


@lowers(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(ctx: GraphLowering, node: torch.fx.Node, grad: TensorValue, x: TensorValue, *args: Any
                         ) -> TensorValue:
    """Each output gradient added at the input position its window's maximum came from (the indices, flat
    over h and w): a scatter-add into zeros, so overlapping windows that share a maximum sum exactly."""
    indices = args[-1]
    dtype = ctx.dtype_of(node)
    lead = x.shape[:-2]
    zeros = TensorValue(dtype, (*lead, x.shape[-2] * x.shape[-1]), lambda idx: cast(Const(0, "int64"), dtype))
    what = f"max_pool2d backward at {ctx.where()}: an index is outside the input"

    def target(u: tuple) -> list[Any]:
        return [*u[:len(lead)], indices.loader(u)]

    summed = scatter(ctx, zeros, grad.shape, target, grad.loader, "sum", what, wrap=False)
    return reshape(summed, x.shape)
