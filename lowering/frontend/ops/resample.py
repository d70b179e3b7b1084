"""Antialiased resizing: F.interpolate(..., mode="bilinear" | "bicubic", antialias=True), the ATen ops
_upsample_bilinear2d_aa and _upsample_bicubic2d_aa (SigLIP-2 resizes its position-embedding table this way).

Eager's CPU kernel (aten/src/ATen/native/cpu/UpSampleKernel.cpp, separable_upsample_generic_Nd_kernel_impl) is
separable: a horizontal pass over the width, then a vertical pass over the height, each skipped where that
size does not change, the intermediate stored in the input's type. Each output position o of an axis reads a
window of input positions [xmin, xmin + xsize) weighted by a filter (_compute_indices_min_size_weights_aa):

- scale = in / out, (in - 1) / (out - 1) with align_corners (0 for one output), or 1 / scale_factor where one
  was given (area_pixel_compute_scale);
- support = interp_size / 2 * scale when downsampling (scale >= 1), else interp_size / 2 (1 for bilinear, 2
  for bicubic); the window holds at most ceil(support) * 2 + 1 positions;
- center = scale * (o + 0.5) (align_corners changes the scale, not the centre), xmin = trunc(center - support
  + 0.5) clamped at 0, xsize = min(trunc(center + support + 0.5), in) - xmin, clamped to [0, window];
- weight j = filter((xmin + j - center + 0.5) / max(scale, 1)), triangle (bilinear) or Keys' cubic with
  a = -0.5 (bicubic), then divided by their sum (unless it is 0);
- out[o] = in[xmin] * w0 + in[xmin + 1] * w1 + ..., summed in that order.

The arithmetic is eager's for float32 (scalar_t = float), with its mixed float and double steps kept (center
and the filter's argument go through double); float64 inputs compute all of it in double. Eager's CPU kernel
has no half types; here they compute in float32 and the intermediate between the passes stays float32.

Here each pass is two kernels: the weights of every output position of the axis, [out, taps] (as eager
precomputes them), then the pass itself, each output element summing `taps` loads of the axis at positions
computed from the sizes (`Indirect`, clamped into the input) times their weights, taps past the window masked.
Sizes may be symbols: the window's bound `taps` is the largest over the declared ranges, and a pass whose
sizes may or may not be equal selects the plain copy at run time, as eager skips it. Windows above 64 taps,
and uint8 inputs (eager's fixed-point path, with weights quantised at a precision chosen from the largest
weight of the whole axis), are refused.

Eager's CPU kernel differs from this in two ways that are eager's, not the formula's: it is built with
fused multiply-adds (its cubic weights and sums round once where these round twice: about 1e-7 relative),
and its vertical pass into an output of width 1 repeats the first row's window for every row of a plane
(the index it reads assumes the width is the loop's inner dimension; CUDA and the same resize transposed
give the rows this computes). Verification at such a point (a vertical resize to width 1) reports eager's
rows as a mismatch.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import sympy
import torch

from ....errors import UnsupportedError
from ...ir.dtypes import is_float
from ...ir.scalar import Const, IndexValue, Indirect, Node, Op, cast
from ...ir.symbolic import value_range
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue
from .index import attach_indirect

aten = OptionalOps(torch.ops.aten)

BILINEAR, BICUBIC = "bilinear", "bicubic"
INTERP_SIZE = {BILINEAR: 2, BICUBIC: 4}
CUBIC_A = -0.5  # Keys' cubic: eager's antialiased bicubic (PIL's); -0.75 is for antialias=False
MAX_TAPS = 64  # windows above this many input positions per output are not unrolled
# Size combinations enumerated to find the largest window exactly; above it, interval arithmetic bounds it.
MAX_ENUMERATED = 20000


class _Math:
    """Scalar ops in a given float type, spelled briefly."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def c(self, value: float, dtype: str | None = None) -> Node:
        return Const(float(value), dtype or self.dtype)

    def op(self, name: str, *args: Node) -> Node:
        return Op(name, args, args[0].dtype)

    @staticmethod
    def cmp(name: str, a: Node, b: Node) -> Node:
        return Op(name, (a, b), "bool")

    def where(self, cond: Node, a: Node, b: Node) -> Node:
        return Op("where", (cond, a, b), a.dtype)


def _int(value: Any) -> Node:
    return IndexValue(sympy.sympify(value), "int64")


def _scale_value(size_in: int, size_out: int, align: bool, scale: float | None, single: bool) -> float:
    """Eager's area_pixel_compute_scale for concrete sizes, in float32 (`single`) or float64."""
    f = np.float32 if single else np.float64
    if align:
        return float(f(size_in - 1) / f(size_out - 1)) if size_out > 1 else 0.0
    if scale is not None and scale > 0:
        return float(f(1.0 / scale))
    return float(f(size_in) / f(size_out))


def _window(scale: float, interp: int, single: bool) -> int:
    """ceil(support) * 2 + 1: the most input positions an output position of that scale reads."""
    f = np.float32 if single else np.float64
    support = f(interp * 0.5 * scale) if scale >= 1.0 else f(interp * 0.5)
    return math.ceil(support) * 2 + 1


class _Axis:
    """One resized axis: sizes, the filter, eager's scale, and the window and weights of an output position."""

    def __init__(self, ctx: GraphLowering, mode: str, size_in: sympy.Expr, size_out: sympy.Expr, align: bool,
                 scale: float | None, dtype: str) -> None:
        self.ctx, self.mode, self.interp = ctx, mode, INTERP_SIZE[mode]
        self.size_in, self.size_out, self.align, self.scale_arg = size_in, size_out, align, scale
        self.m = _Math(dtype)
        self.single = dtype == "float32"

    # --- static facts -----------------------------------------------------------------------------

    def always_equal(self) -> bool:
        return sympy.expand(self.size_in - self.size_out) == 0

    def never_equal(self) -> bool:
        if not (self.size_in - self.size_out).free_symbols:
            return self.size_in != self.size_out
        gap = value_range(self.size_in - self.size_out, self.ctx.ranges())
        return bool(gap.lower > 0 or gap.upper < 0)

    def taps(self) -> int:
        """The largest window over the declared ranges (sizes at which the pass is skipped excluded)."""
        ranges = self.ctx.ranges()
        symbols = sorted(self.size_in.free_symbols | self.size_out.free_symbols, key=str)
        count = math.prod(ranges[s][1] - ranges[s][0] + 1 for s in symbols) if symbols else 1
        if count <= MAX_ENUMERATED:
            most = 0
            for values in itertools.product(*(range(ranges[s][0], ranges[s][1] + 1) for s in symbols)):
                point = dict(zip(symbols, (sympy.Integer(v) for v in values)))
                size_in, size_out = int(self.size_in.xreplace(point)), int(self.size_out.xreplace(point))
                if size_in != size_out and size_out > 0:
                    scale = _scale_value(size_in, size_out, self.align, self.scale_arg, self.single)
                    most = max(most, _window(scale, self.interp, self.single))
            return max(most, 1)
        # Too many combinations: an interval bound of the scale (never below the largest one).
        if self.align:
            ratio = (self.size_in - 1) / sympy.Max(self.size_out - 1, 1)
        elif self.scale_arg is not None and self.scale_arg > 0:
            ratio = sympy.Float(1.0 / self.scale_arg)
        else:
            ratio = self.size_in / self.size_out
        upper = value_range(sympy.cancel(ratio), ranges).upper
        return _window(float(upper) * (1 + 1e-6), self.interp, False)

    # --- the scalar expressions eager computes ----------------------------------------------------------

    def scale(self) -> Node:
        m = self.m
        if self.align:
            ratio = m.op("div", cast(_int(self.size_in - 1), m.dtype), cast(_int(sympy.Max(self.size_out - 1, 1)), m.dtype))
            if self.size_out.is_Integer:
                return ratio if int(self.size_out) > 1 else m.c(0)
            return m.where(m.cmp("gt", _int(self.size_out), Const(1, "int64")), ratio, m.c(0))
        if self.scale_arg is not None and self.scale_arg > 0:
            value = 1.0 / self.scale_arg
            return m.c(float(np.float32(value)) if self.single else value)
        return m.op("div", cast(_int(self.size_in), m.dtype), cast(_int(self.size_out), m.dtype))

    def support(self, scale: Node) -> Node:
        m = self.m
        half = self.interp * 0.5
        return m.where(m.cmp("ge", scale, m.c(1)), m.op("mul", m.c(half), scale), m.c(half))

    def window(self, o: sympy.Expr) -> tuple[Node, Node, Node, Node]:
        """(center, xmin, xsize, 1 / max(scale, 1)) of output position o, as eager computes them."""
        m = self.m
        scale = self.scale()
        support = self.support(scale)
        downsampling = m.cmp("ge", scale, m.c(1))
        inverse = m.where(downsampling, m.op("div", m.c(1), scale), m.c(1))
        # center = scale * (o + 0.5): double arithmetic, stored as scalar_t
        center = cast(m.op("mul", cast(scale, "float64"), m.op("add", cast(_int(o), "float64"), m.c(0.5, "float64"))),
                      m.dtype)

        def edge(value: Node) -> Node:  # static_cast<int64_t>(value + 0.5), the + 0.5 in double
            return cast(m.op("add", cast(value, "float64"), m.c(0.5, "float64")), "int64")

        xmin = Op("maximum", (edge(m.op("sub", center, support)), Const(0, "int64")), "int64")
        xmax = Op("minimum", (edge(m.op("add", center, support)), _int(self.size_in)), "int64")
        largest = Op("add", (Op("mul", (cast(m.op("ceil", support), "int64"), Const(2, "int64")), "int64"),
                             Const(1, "int64")), "int64")
        xsize = Op("sub", (xmax, xmin), "int64")
        xsize = Op("minimum", (Op("maximum", (xsize, Const(0, "int64")), "int64"), largest), "int64")
        return center, xmin, xsize, inverse

    def filter(self, x: Node) -> Node:
        m = self.m
        x = m.op("abs", x)
        one = m.cmp("lt", x, m.c(1))
        if self.mode == BILINEAR:
            return m.where(one, m.op("sub", m.c(1), x), m.c(0))
        a = m.c(CUBIC_A)

        def near(s: Node) -> Node:  # ((a + 2) * s - (a + 3)) * s * s + 1
            inner = m.op("sub", m.op("mul", m.op("add", a, m.c(2)), s), m.op("add", a, m.c(3)))
            return m.op("add", m.op("mul", m.op("mul", inner, s), s), m.c(1))

        def far(s: Node) -> Node:  # ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
            inner = m.op("add", m.op("mul", m.op("sub", m.op("mul", a, s), m.op("mul", m.c(5), a)), s),
                         m.op("mul", m.c(8), a))
            return m.op("sub", m.op("mul", inner, s), m.op("mul", m.c(4), a))

        return m.where(one, near(x), m.where(m.cmp("lt", x, m.c(2)), far(x), m.c(0)))

    def raw_weight(self, j: Node, center: Node, xmin: Node, xsize: Node, inverse: Node) -> Node:
        """filter((j + xmin - center + 0.5) * invscale), 0 past the window: the int to scalar_t, the + 0.5 and
        the product in double, the filter in scalar_t."""
        m = self.m
        offset = m.op("sub", cast(Op("add", (j, xmin), "int64"), m.dtype), center)
        argument = m.op("mul", m.op("add", cast(offset, "float64"), m.c(0.5, "float64")), cast(inverse, "float64"))
        inside = m.cmp("lt", j, xsize)
        return m.where(inside, self.filter(cast(argument, m.dtype)), m.c(0))

    def weights(self, taps: int) -> TensorValue:
        """[out, taps]: weight j of output position o, normalised by the sum of the window's weights."""
        m = self.m

        def load(idx: tuple) -> Node:
            o, j = idx
            center, xmin, xsize, inverse = self.window(o)
            total: Node = m.c(0)
            for k in range(taps):
                total = m.op("add", total, self.raw_weight(Const(k, "int64"), center, xmin, xsize, inverse))
            weight = self.raw_weight(_int(j), center, xmin, xsize, inverse)
            return m.where(m.cmp("ne", total, m.c(0)), m.op("div", weight, total), weight)

        return TensorValue(m.dtype, (self.size_out, sympy.Integer(taps)), load)


def _resample_pass(ctx: GraphLowering, src: TensorValue, dim: int, axis: _Axis, what: str) -> TensorValue:
    """One separable pass over `dim` of src (a view of memory), in the axis's float type."""
    m = axis.m
    taps = axis.taps()
    if taps > MAX_TAPS:
        ranges = ctx.ranges()
        symbols = sorted(axis.size_in.free_symbols | axis.size_out.free_symbols, key=str)
        declared = "".join(f", {s} in {ranges[s][0]}..{ranges[s][1]}" for s in symbols)
        raise UnsupportedError(
            f"{what}: resizing dim {dim} from {axis.size_in} to {axis.size_out} (align_corners={axis.align}"
            f"{declared}) reads "
            f"up to {taps} input positions per output over the declared ranges, above the {MAX_TAPS} aotpack "
            f"unrolls; resize in steps (two interpolations, each shrinking less), or narrow the declared ranges")
    weights = ctx.realize(axis.weights(taps))
    var = sympy.Symbol(f"x{dim}", integer=True)
    last = _int(axis.size_in - 1)
    message = f"{what}: a position is outside the input (an aotpack bug: positions are clamped)"
    may_equal = not axis.never_equal()

    def load(idx: tuple) -> Node:
        o = idx[dim]
        _, xmin, xsize, _ = axis.window(o)
        total: Node | None = None
        for j in range(taps):
            position = xmin if j == 0 else Op("add", (xmin, Const(j, "int64")), "int64")
            position = Op("minimum", (position, last), "int64")
            at = list(idx)
            at[dim] = var
            value = cast(attach_indirect(src.loader(tuple(at)), Indirect(var, position, axis.size_in, False, message)),
                         m.dtype)
            term = m.op("mul", value, weights.loader((o, sympy.Integer(j))))
            if total is None:
                total = term  # eager always reads the first position (its weight is 0 in an empty window)
            else:
                total = m.op("add", total, m.where(m.cmp("lt", Const(j, "int64"), xsize), term, m.c(0)))
        if may_equal:  # eager skips the pass (a copy) where the sizes are equal
            at = list(idx)
            at[dim] = sympy.Min(o, axis.size_in - 1)
            same = m.cmp("eq", _int(axis.size_in), _int(axis.size_out))
            total = m.where(same, cast(src.loader(tuple(at)), m.dtype), total)
        return total

    shape = list(src.shape)
    shape[dim] = axis.size_out
    return TensorValue(m.dtype, tuple(shape), load)


def _resample(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, mode: str, align_corners: bool,
              scales: Any) -> TensorValue:
    what = f"antialiased {mode} interpolation at {ctx.where()}"
    if x.rank != 4 or not is_float(x.dtype):
        raise UnsupportedError(
            f"{what}: a {x.rank}-d {x.dtype} input; aotpack lowers antialiased resizing of 4-d float inputs. "
            + ("Eager resizes uint8 images in fixed point (int16 weights at a precision chosen from the axis's "
               "largest weight), which aotpack does not reproduce: convert to float before F.interpolate "
               "(x.float()) and round back after it" if x.dtype == "uint8" else ""))
    out_shape = ctx.shape_of(node)
    dtype = "float64" if x.dtype == "float64" else "float32"
    scales = list(scales) if scales else [None, None]
    rows = _Axis(ctx, mode, x.shape[2], out_shape[2], bool(align_corners), scales[0], dtype)
    cols = _Axis(ctx, mode, x.shape[3], out_shape[3], bool(align_corners), scales[1], dtype)
    value = x
    passes = [(3, cols), (2, rows)]  # eager's order: horizontal (the width) first, then vertical
    pending = [(dim, axis) for dim, axis in passes if not axis.always_equal()]
    for dim, axis in pending:
        if value.view is None:  # positions from data are bound only in loads of memory (index.py)
            value = ctx.realize(value)
        value = _resample_pass(ctx, value, dim, axis, what)
    result = value
    return TensorValue(x.dtype, out_shape, lambda idx: cast(result.loader(idx), x.dtype))


@lowers(aten._upsample_bilinear2d_aa.default)
def _bilinear_aa(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, output_size: Any, align_corners: bool,
                 scales_h: float | None = None, scales_w: float | None = None) -> TensorValue:
    return _resample(ctx, node, x, BILINEAR, align_corners, [scales_h, scales_w])


@lowers(aten._upsample_bicubic2d_aa.default)
def _bicubic_aa(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, output_size: Any, align_corners: bool,
                scales_h: float | None = None, scales_w: float | None = None) -> TensorValue:
    return _resample(ctx, node, x, BICUBIC, align_corners, [scales_h, scales_w])


@lowers(aten._upsample_bilinear2d_aa.vec)
def _bilinear_aa_vec(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, output_size: Any, align_corners: bool,
                     scale_factors: Any = None) -> TensorValue:
    return _resample(ctx, node, x, BILINEAR, align_corners, scale_factors)


@lowers(aten._upsample_bicubic2d_aa.vec)
def _bicubic_aa_vec(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, output_size: Any, align_corners: bool,
                    scale_factors: Any = None) -> TensorValue:
    return _resample(ctx, node, x, BICUBIC, align_corners, scale_factors)
