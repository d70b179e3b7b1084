"""Pooling as small fixed windows unrolled into an elementwise expression (fuses with its neighbours);
windows too large to unroll (max pooling's, adaptive pooling's) as a reduction over the largest window.

Window reads use clamped indices and a select, like padding, so they never leave the input. The window
helpers work over the last one or two dims; 3-d pooling is separable and runs as a pass over (h, w) and a
pass over depth (depth moved last by a permutation, which is free): the max over a box is the max over depth
of the maxes over (h, w), a box's sum the sum of its planes' sums, and its element count (ATen's divisor,
padding and ceil mode included) the product of the per-dim counts.
"""

from __future__ import annotations

import itertools
import math
import operator
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
from ..values import TensorValue, permute, reshape
from .linalg import per_dim
from .reduce import _mean
from .scatter import scatter

aten = OptionalOps(torch.ops.aten)

# Windows with more elements than this are not unrolled (they would make huge kernels).
MAX_WINDOW = 64

Ints = tuple[int, ...]


def _all_of(tests: list[Node]) -> Node:
    result = tests[0]
    for test in tests[1:]:
        result = Op("logical_and", (result, test), "bool")
    return result


def _inside(i: sympy.Expr, size: sympy.Expr) -> Node:
    ge = Op("ge", (IndexValue(i, "int64"), Const(0, "int64")), "bool")
    lt = Op("lt", (IndexValue(i, "int64"), IndexValue(size, "int64")), "bool")
    return Op("logical_and", (ge, lt), "bool")


def _clamped(i: sympy.Expr, size: sympy.Expr) -> sympy.Expr:
    return sympy.Max(0, sympy.Min(i, size - 1))


def _once(ctx: GraphLowering, x: TensorValue, kernel: Ints, stride: Ints) -> TensorValue:
    """Overlapping windows read each input element several times: compute a lazy input once, in memory."""
    overlapping = any(k > s for k, s in zip(kernel, stride))
    return ctx.realize(x) if overlapping and x.view is None else x


def _always_inside(padding: Ints, ceil_mode: bool) -> bool:
    """Without padding and ceil mode, the last window ends at or before the input's last element, so window
    reads need no clamp or select: their loads stay affine in the output index and vectorise."""
    return not any(padding) and not ceil_mode


def _window_loads(x: TensorValue, idx: tuple, kernel: Ints, stride: Ints, padding: Ints, dilation: Ints,
                  ceil_mode: bool) -> list[tuple[Node | None, Node]]:
    """(inside?, value) for every window position of output index idx (..., o...) over the last len(kernel)
    dims; inside? is None where the position is always inside the input."""
    exact = _always_inside(padding, ceil_mode)
    return [_window_element(x, idx, tuple(sympy.Integer(a) for a in taps), stride, padding, dilation, exact)
            for taps in itertools.product(*(range(k) for k in kernel))]


def _window_element(x: TensorValue, idx: tuple, taps: tuple, stride: Ints, padding: Ints, dilation: Ints,
                    exact: bool) -> tuple[Node | None, Node]:
    """(inside?, value) of window position `taps` of output index idx (..., o...) over the last len(taps) dims."""
    rank = len(taps)
    sizes = x.shape[-rank:]
    position = [o * s - p + a * d for o, a, s, p, d in zip(idx[-rank:], taps, stride, padding, dilation)]
    if exact:
        return None, x.loader(tuple(idx[:-rank]) + tuple(position))
    value = x.loader(tuple(idx[:-rank]) + tuple(_clamped(i, size) for i, size in zip(position, sizes)))
    return _all_of([_inside(i, size) for i, size in zip(position, sizes)]), value


def _flat_position(idx: tuple, taps: Ints, stride: Ints, padding: Ints, dilation: Ints, sizes: tuple) -> sympy.Expr:
    """The input position of window position `taps`, flat over the pooled dims (h * W + w), as ATen's indices."""
    flat = sympy.Integer(0)
    for o, a, s, p, d, size in zip(idx[-len(taps):], taps, stride, padding, dilation, sizes):
        flat = flat * size + (o * s - p + a * d)
    return flat


def _max_pool(ctx: GraphLowering, x: TensorValue, out_shape: tuple, kernel: Ints, stride: Ints, padding: Ints,
              dilation: Ints, ceil_mode: bool, what: str) -> tuple[TensorValue, TensorValue]:
    """Max pooling over the last len(kernel) dims: the values and their flat positions (ATen's indices)."""
    kernel = _reachable_taps(ctx, x, kernel, padding, dilation)
    x = _once(ctx, x, kernel, stride)
    lowest = _lowest(x.dtype)
    if math.prod(kernel) > MAX_WINDOW:
        return _max_pool_reduced(ctx, x, out_shape, kernel, stride, padding, dilation, ceil_mode, lowest, what)

    def load(idx: tuple) -> Node:
        best: Node | None = None
        for inside, value in _window_loads(x, idx, kernel, stride, padding, dilation, ceil_mode):
            value = value if inside is None else Op("where", (inside, value, lowest), x.dtype)
            best = value if best is None else Op("maximum", (best, value), x.dtype)
        return best

    def argmax(idx: tuple) -> Node:
        """The flat h * W + w (d * H * W + h * W + w) position of the maximum, picked as eager's CPU kernel does:
        the first largest element, or the last NaN; the window's first element inside the input if all are -inf.
        Written against the window's max, each element compared with it, rather than as a running (best, where)
        pair, whose every step reads the previous best twice: expressions are trees, and that one doubled with
        each element (a 4 x 4 window took 76 s to lower, 5 x 5 did not finish)."""
        loads = _window_loads(x, idx, kernel, stride, padding, dilation, ceil_mode)
        sizes = x.shape[-len(kernel):]
        positions = [IndexValue(_flat_position(idx, taps, stride, padding, dilation, sizes), "int64")
                     for taps in itertools.product(*(range(k) for k in kernel))]
        best = load(idx)
        first = positions[-1]
        for (inside, value), position in reversed(list(zip(loads, positions))):
            largest = Op("eq", (value, best), "bool")
            largest = largest if inside is None else Op("logical_and", (inside, largest), "bool")
            first = Op("where", (largest, position, first), "int64")
        if not is_float(x.dtype):
            return first
        last_nan = positions[0]
        for (inside, value), position in zip(loads, positions):
            nan = Op("isnan", (value,), "bool")
            nan = nan if inside is None else Op("logical_and", (inside, nan), "bool")
            last_nan = Op("where", (nan, position, last_nan), "int64")
        return Op("where", (Op("isnan", (best,), "bool"), last_nan, first), "int64")

    return TensorValue(x.dtype, out_shape, load), TensorValue("int64", out_shape, argmax)


@lowers(aten.max_pool2d_with_indices.default)
def _max_pool2d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, kernel_size: Any, stride: Any = None,
                padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> tuple:
    kernel = per_dim(kernel_size, 2)
    return _max_pool(ctx, x, ctx.shape_of(node), kernel, per_dim(stride, 2) if stride else kernel, per_dim(padding, 2),
                     per_dim(dilation, 2), ceil_mode, "max pooling")


def _depth_last(x: TensorValue) -> TensorValue:
    """[..., d, h, w] as [..., h, w, d]: a view (or a rewritten index), so that a pass over the last dim pools
    depth."""
    lead = list(range(x.rank - 3))
    return permute(x, [*lead, x.rank - 2, x.rank - 1, x.rank - 3])


def _depth_back(x: TensorValue) -> TensorValue:
    lead = list(range(x.rank - 3))
    return permute(x, [*lead, x.rank - 1, x.rank - 3, x.rank - 2])


def _planes_shape(x: TensorValue, out_shape: tuple) -> tuple:
    """The shape after the (h, w) pass of a 3-d pooling: the input's depth, the output's height and width."""
    return (*out_shape[:-3], x.shape[-3], *out_shape[-2:])


def _for_depth_pass(ctx: GraphLowering, planes: TensorValue, overlapping: bool) -> TensorValue:
    """The (h, w) pass's result, which depth windows that overlap read several times: computed once, in its
    own layout (a realisation after the permutation would write it depth-innermost), then seen depth last."""
    if overlapping and planes.view is None:
        planes = ctx.realize(planes)
    return _depth_last(planes)


@lowers(aten.max_pool3d_with_indices.default)
def _max_pool3d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, kernel_size: Any, stride: Any = None,
                padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> tuple:
    """The max over each (h, w) window of every depth plane, then the max of kd of those (separable: the same
    maximum, and NaN still propagates). Where the indices are read (max_unpool3d), the whole window is unrolled
    at once instead, as 2-d windows are, so that the flat d * H * W + h * W + w of eager's first maximum is
    picked among all kd * kh * kw elements; above 64 elements they are refused where read, naming the line."""
    kernel, pad, dil = per_dim(kernel_size, 3), per_dim(padding, 3), per_dim(dilation, 3)
    step = per_dim(stride, 3) if stride else kernel
    out_shape = ctx.shape_of(node)
    what = "3-d max pooling"
    if _reads_indices(node) and math.prod(kernel) <= MAX_WINDOW:
        return _max_pool(ctx, x, out_shape, kernel, step, pad, dil, ceil_mode, what)
    planes = _max_pool(ctx, x, _planes_shape(x, out_shape), kernel[1:], step[1:], pad[1:], dil[1:], ceil_mode,
                       what)[0]
    planes = _for_depth_pass(ctx, planes, kernel[0] > step[0])
    depth = _max_pool(ctx, planes, (*out_shape[:-3], *out_shape[-2:], out_shape[-3]), kernel[:1], step[:1],
                      pad[:1], dil[:1], ceil_mode, what)[0]
    what = f"{what} windows above {MAX_WINDOW} elements ({'x'.join(str(k) for k in kernel)})"
    return _depth_back(depth), _refused_indices(ctx, out_shape, what, "or with smaller windows")


def _reads_indices(node: torch.fx.Node) -> bool:
    """Whether anything reads the indices, the second output of a max pooling."""
    return any(user.target is operator.getitem and user.args[1] == 1 for user in node.users)


def _max_pool_reduced(ctx: GraphLowering, x: TensorValue, out_shape: tuple, kernel: Ints, stride: Ints,
                      padding: Ints, dilation: Ints, ceil_mode: bool, lowest: Node, what: str) -> tuple:
    """Windows too large to unroll (YOLO's spatial pyramid pooling, 13 x 13) as a max over the window's rows and
    columns, a reduction. The indices are refused where they are read: eager's choice among ties and NaNs
    (ops above) is not what an argmax reduction picks."""
    exact = _always_inside(padding, ceil_mode)
    rank = len(out_shape)

    def element(idx: tuple) -> Node:
        inside, value = _window_element(x, tuple(idx[:rank]), tuple(idx[rank:]), stride, padding, dilation, exact)
        return value if inside is None else Op("where", (inside, value, lowest), x.dtype)

    window = list(range(-len(kernel), 0))
    values = ctx.reduce(TensorValue(x.dtype, (*out_shape, *kernel), element), window, "max", x.dtype)
    what = f"{what} windows above {MAX_WINDOW} elements ({'x'.join(str(k) for k in kernel)})"
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


def _accumulator(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


def _reachable_taps(ctx: GraphLowering, x: TensorValue, kernel: Ints, padding: Ints, dilation: Ints) -> Ints:
    """The kernel cut to the taps that can fall inside the input: window o's tap j reads o * stride - p + j * d,
    which is past the input for every o once j * d >= size + p (size at its declared maximum). HF EfficientNet
    pools a 7 x 7 map with AvgPool2d(1280, ceil_mode=True): one window of 7 x 7 elements, not 1280 x 1280. The
    taps cut read only padding, so sums, maxima and indices are unchanged; a divisor counts the whole kernel."""
    ranges = {s.expr: (s.min, s.max) for s in ctx.symbols}
    sizes = x.shape[-len(kernel):]
    return tuple(min(k, -(-(int(upper_bound(size, ranges)) + p) // d))
                 for k, size, p, d in zip(kernel, sizes, padding, dilation))


def _window_sums(ctx: GraphLowering, x: TensorValue, out_shape: tuple, kernel: Ints, stride: Ints, padding: Ints,
                 ceil_mode: bool) -> TensorValue:
    """Each window's sum over the last len(kernel) dims, in the accumulator's dtype (padding adds zeros)."""
    kernel = _reachable_taps(ctx, x, kernel, padding, (1,) * len(kernel))
    if math.prod(kernel) > MAX_WINDOW:
        raise UnsupportedError(f"average pooling windows above {MAX_WINDOW} elements "
                               f"({'x'.join(str(k) for k in kernel)}) are not supported; pool in smaller steps "
                               f"(two poolings) or use adaptive_avg_pool / mean")
    x = _once(ctx, x, kernel, stride)
    acc = _accumulator(x.dtype)

    def load(idx: tuple) -> Node:
        total: Node | None = None
        for inside, value in _window_loads(x, idx, kernel, stride, padding, (1,) * len(kernel), ceil_mode):
            value = cast(value, acc) if inside is None else Op("where", (inside, cast(value, acc), Const(0.0, acc)), acc)
            total = value if total is None else Op("add", (total, value), acc)
        return total

    return TensorValue(acc, out_shape, load)


def _avg_divisor(idx: tuple, sizes: tuple, kernel: Ints, stride: Ints, padding: Ints, ceil_mode: bool,
                 count_include_pad: bool, divisor_override: Any, acc: str) -> Node:
    """What average pooling divides output idx's window sum by, as ATen computes it: the window clipped to the
    padded input, then (without count_include_pad) to the input, per dim; the count is their product."""
    if divisor_override:
        return Const(float(divisor_override), acc)
    if _always_inside(padding, ceil_mode):
        return Const(float(math.prod(kernel)), acc)
    count = sympy.Integer(1)
    for o, size, k, s, p in zip(idx[-len(kernel):], sizes, kernel, stride, padding):
        start = o * s - p
        end = sympy.Min(start + k, size + p)
        if not count_include_pad:
            start, end = sympy.Max(start, 0), sympy.Min(end, size)
        count = count * (end - start)
    return cast(IndexValue(count, "int64"), acc)


@lowers(aten.avg_pool2d.default)
def _avg_pool2d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, kernel_size: Any, stride: Any = None,
                padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                divisor_override: Any = None) -> TensorValue:
    kernel = per_dim(kernel_size, 2)
    step = per_dim(stride, 2) if stride else kernel
    pad = per_dim(padding, 2)
    sizes = x.shape[-2:]
    sums = _window_sums(ctx, x, ctx.shape_of(node), kernel, step, pad, ceil_mode)

    def load(idx: tuple) -> Node:
        divisor = _avg_divisor(idx, sizes, kernel, step, pad, ceil_mode, count_include_pad, divisor_override, sums.dtype)
        return cast(Op("div", (sums.loader(idx), divisor), sums.dtype), x.dtype)

    return TensorValue(x.dtype, sums.shape, load)


@lowers(aten.avg_pool3d.default)
def _avg_pool3d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, kernel_size: Any, stride: Any = None,
                padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                divisor_override: Any = None) -> TensorValue:
    """The sum over each (h, w) window of every depth plane (in float32 for half inputs), the sum of kd of
    those, divided once by the box's count: the product of the per-dim counts, which is what ATen computes.
    Windows up to 64 elements per pass: X3D's (16, 7, 7) head pooling is 49 and 16."""
    kernel, pad = per_dim(kernel_size, 3), per_dim(padding, 3)
    step = per_dim(stride, 3) if stride else kernel
    out_shape = ctx.shape_of(node)
    sizes = x.shape[-3:]
    planes = _window_sums(ctx, x, _planes_shape(x, out_shape), kernel[1:], step[1:], pad[1:], ceil_mode)
    planes = _for_depth_pass(ctx, planes, kernel[0] > step[0])
    sums = _depth_back(_window_sums(ctx, planes, (*out_shape[:-3], *out_shape[-2:], out_shape[-3]), kernel[:1],
                                    step[:1], pad[:1], ceil_mode))

    def load(idx: tuple) -> Node:
        divisor = _avg_divisor(idx, sizes, kernel, step, pad, ceil_mode, count_include_pad, divisor_override, sums.dtype)
        return cast(Op("div", (sums.loader(idx), divisor), sums.dtype), x.dtype)

    return TensorValue(x.dtype, out_shape, load)


def _adaptive_bounds(sizes: tuple, out: Ints, outs: tuple) -> list[tuple[sympy.Expr, sympy.Expr]]:
    """Output position `outs`'s window in adaptive pooling of dims of `sizes` to `out`: (start, end) per dim,
    as ATen computes them."""
    return [(FloorDiv(i * size, o), CeilDiv((i + 1) * size, o)) for i, size, o in zip(outs, sizes, out)]


def _adaptive_window(ctx: GraphLowering, x: TensorValue, out: Ints) -> Ints:
    """The largest window of adaptive pooling of x's last len(out) dims to `out` over the declared ranges."""
    ranges = {s.expr: (s.min, s.max) for s in ctx.symbols}
    return tuple(upper_bound(CeilDiv(size, o) + 1, ranges) for size, o in zip(x.shape[-len(out):], out))


def _adaptive_element(x: TensorValue, out: Ints, lead: tuple, outs: tuple, taps: tuple, dtype: str,
                      outside: Node) -> Node:
    """Element `taps` from the corner of output position `outs`'s window, in `dtype`, or `outside` past the
    window's end (windows differ in size)."""
    sizes = x.shape[-len(out):]
    bounds = _adaptive_bounds(sizes, out, outs)
    position = [start + a for (start, _), a in zip(bounds, taps)]
    inside = _all_of([Op("lt", (IndexValue(i, "int64"), IndexValue(end, "int64")), "bool")
                      for i, (_, end) in zip(position, bounds)])
    value = cast(x.loader((*lead, *(_clamped(i, size) for i, size in zip(position, sizes)))), dtype)
    return Op("where", (inside, value, outside), dtype)


def _adaptive_count(sizes: tuple, out: Ints, outs: tuple, acc: str) -> Node:
    """The number of elements in output position `outs`'s adaptive window."""
    count = sympy.Integer(1)
    for start, end in _adaptive_bounds(sizes, out, outs):
        count = count * (end - start)
    return cast(IndexValue(count, "int64"), acc)


def _adaptive_sums(ctx: GraphLowering, x: TensorValue, out_shape: tuple, out: Ints) -> TensorValue:
    """Each adaptive window's sum over x's last len(out) dims, in the accumulator's dtype."""
    window = _adaptive_window(ctx, x, out)
    acc = _accumulator(x.dtype)
    zero = Const(0.0, acc)
    lead = len(out_shape) - len(out)
    if math.prod(window) > MAX_WINDOW:
        # Windows too large to unroll (VGG's pooling to 7 x 7 of images up to 448 pixels: windows of 65 x 65)
        # are a sum over the largest window's rows and columns, masked past each window's end, into a buffer.
        windows = TensorValue(acc, (*out_shape, *window),
                              lambda idx: _adaptive_element(x, out, tuple(idx[:lead]), tuple(idx[lead:lead + len(out)]),
                                                            tuple(idx[lead + len(out):]), acc, zero))
        return ctx.reduce(windows, list(range(-len(out), 0)), "sum", acc)

    def load(idx: tuple) -> Node:
        total: Node | None = None
        for taps in itertools.product(*(range(w) for w in window)):
            value = _adaptive_element(x, out, tuple(idx[:lead]), tuple(idx[lead:]),
                                      tuple(sympy.Integer(a) for a in taps), acc, zero)
            total = value if total is None else Op("add", (total, value), acc)
        return total

    return TensorValue(acc, out_shape, load)


@lowers(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, output_size: Any) -> TensorValue:
    out = per_dim(output_size, 2)
    if out == (1, 1):
        return _mean(ctx, node, x, [-2, -1], True)
    sizes = x.shape[-2:]
    sums = _adaptive_sums(ctx, x, ctx.shape_of(node), out)

    def mean(idx: tuple) -> Node:
        return cast(Op("div", (sums.loader(idx), _adaptive_count(sizes, out, idx[-2:], sums.dtype)), sums.dtype),
                    x.dtype)

    return TensorValue(x.dtype, sums.shape, mean)


@lowers(aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool3d.default)
def _adaptive_avg_pool3d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, output_size: Any) -> TensorValue:
    """Separable like average pooling: each depth plane's sums over its (h, w) windows, then the sums of those
    over each depth window, divided by the box's count (the product of the per-dim counts)."""
    out = per_dim(output_size, 3)
    if out == (1, 1, 1):
        return _mean(ctx, node, x, [-3, -2, -1], True)
    out_shape = ctx.shape_of(node)
    sizes = x.shape[-3:]
    planes = _adaptive_sums(ctx, x, _planes_shape(x, out_shape), out[1:])
    depth_window = _adaptive_window(ctx, _depth_last(planes), out[:1])[0]
    planes = _for_depth_pass(ctx, planes, depth_window > 1)
    sums = _depth_back(_adaptive_sums(ctx, planes, (*out_shape[:-3], *out_shape[-2:], out_shape[-3]), out[:1]))

    def mean(idx: tuple) -> Node:
        return cast(Op("div", (sums.loader(idx), _adaptive_count(sizes, out, idx[-3:], sums.dtype)), sums.dtype),
                    x.dtype)

    return TensorValue(x.dtype, out_shape, mean)


def _adaptive_max(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, out: Ints, what: str) -> tuple:
    """The max over each window (fastai's concat pooling, spatial pyramid pooling), as a reduction over the
    largest window, masked past each window's end. The indices are refused where they are read, as for max
    pooling's large windows."""
    out_shape = ctx.shape_of(node)
    lead = len(out_shape) - len(out)
    lowest = _lowest(x.dtype)
    windows = TensorValue(x.dtype, (*out_shape, *_adaptive_window(ctx, x, out)),
                          lambda idx: _adaptive_element(x, out, tuple(idx[:lead]), tuple(idx[lead:lead + len(out)]),
                                                        tuple(idx[lead + len(out):]), x.dtype, lowest))
    values = ctx.reduce(windows, list(range(-len(out), 0)), "max", x.dtype)
    return values, _refused_indices(ctx, out_shape, what)


@lowers(aten.adaptive_max_pool2d.default)
def _adaptive_max_pool2d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, output_size: Any) -> tuple:
    return _adaptive_max(ctx, node, x, per_dim(output_size, 2), "adaptive max pooling")


@lowers(aten.adaptive_max_pool3d.default)
def _adaptive_max_pool3d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, output_size: Any) -> tuple:
    return _adaptive_max(ctx, node, x, per_dim(output_size, 3), "3-d adaptive max pooling")


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
