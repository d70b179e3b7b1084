"""grid_sample (aten.grid_sampler_2d): each output element [n, c, ho, wo] read from the input at the point
grid[n, ho, wo] gives, by bilinear, nearest or bicubic interpolation, through a padding mode.

One elementwise expression: the loader reads the grid's x and y, computes the source coordinates in the
input's float type and gathers the 1, 4 or 16 taps with positions from data (`Indirect`, as index.py's
gathers), so it fuses with its neighbours and both backends get it from the same IR. The arithmetic follows
eager's vectorised CPU kernel (aten/src/ATen/native/cpu/GridSamplerKernel.cpp) operation for operation, so
that rounding, NaN and infinity behave as there:

- unnormalise: (g + 1) * ((size - 1) / 2) with align_corners, (g + 1) * (size / 2) - 0.5 without;
- border clips to [0, size - 1] with NaN going to 0; reflection reflects about the span (trunc of the number
  of double flips, then the nearer of the two images; NaN and infinity give NaN, which the clip makes 0);
- bilinear floors and weights the four neighbours; nearest rounds half to even (nearbyint); bicubic weighs
  the 4 x 4 taps around the floor by the cubic convolution with A = -0.75, each tap's coordinate through the
  padding mode;
- with zeros padding a tap outside the input reads 0 (its weight still multiplies it: a NaN or infinite grid
  value gives NaN, as eager's 0 * NaN does).

Where eager converts a coordinate to an int32 and compares (a coordinate like 1e10 wraps to INT_MIN there and
so counts as outside), the test here is made in float, which says outside for the same values, and the position
loaded is clamped in float before its conversion: no grid value, however large or NaN, becomes an
out-of-bounds or wrapped index.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch

from ....errors import UnsupportedError
from ...ir.dtypes import compute_dtype, is_float
from ...ir.scalar import Const, IndexValue, Indirect, Node, Op, cast
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue
from .index import attach_indirect

aten = OptionalOps(torch.ops.aten)

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
CUBIC_A = -0.75  # eager's (UpSampleBicubic2d.h)


class _Math:
    """Scalar ops in one float type (the input's compute type), spelled briefly."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def c(self, value: float) -> Node:
        return Const(float(value), self.dtype)

    def size(self, expr: sympy.Expr) -> Node:
        return cast(IndexValue(expr, "int64"), self.dtype)

    def op(self, name: str, *args: Node) -> Node:
        return Op(name, args, self.dtype)

    def add(self, a: Node, b: Node) -> Node:
        return self.op("add", a, b)

    def sub(self, a: Node, b: Node) -> Node:
        return self.op("sub", a, b)

    def mul(self, a: Node, b: Node) -> Node:
        return self.op("mul", a, b)

    def where(self, cond: Node, a: Node, b: Node) -> Node:
        return self.op("where", cond, a, b)

    @staticmethod
    def cmp(name: str, a: Node, b: Node) -> Node:
        return Op(name, (a, b), "bool")

    @staticmethod
    def both(a: Node | None, b: Node | None) -> Node | None:
        if a is None or b is None:
            return a if b is None else b
        return Op("logical_and", (a, b), "bool")


class _Axis:
    """One spatial axis of the input (size `size`): grid value -> source coordinate, as eager computes it."""

    def __init__(self, m: _Math, size: sympy.Expr, padding: int, align_corners: bool) -> None:
        self.m, self.size, self.padding, self.align = m, size, padding, align_corners
        self.last = m.size(size - 1)  # max_val = size - 1

    def unnormalize(self, g: Node) -> Node:
        m = self.m
        if self.align:
            return m.mul(m.add(g, m.c(1)), m.op("div", m.size(self.size - 1), m.c(2)))
        return m.sub(m.mul(m.add(g, m.c(1)), m.op("div", m.size(self.size), m.c(2))), m.c(0.5))

    def clip(self, v: Node) -> Node:
        """To [0, size - 1]; NaN to 0 (eager's clamp_min with its operands inverted)."""
        m = self.m
        low = m.where(m.cmp("gt", v, m.c(0)), v, m.c(0))
        return m.where(m.cmp("lt", low, self.last), low, self.last)

    def reflect(self, v: Node) -> Node:
        m = self.m
        if self.align:
            twice_span = m.mul(m.size(self.size - 1), m.c(2))
            in_span = m.op("abs", v)
        else:
            twice_span = m.mul(m.size(self.size), m.c(2))
            in_span = m.op("abs", m.sub(v, m.c(-0.5)))
        flips = m.op("trunc", m.op("div", in_span, twice_span))
        extra = m.sub(in_span, m.mul(flips, twice_span))
        reflected = m.op("minimum", extra, m.sub(twice_span, extra))
        if not self.align:
            return m.add(reflected, m.c(-0.5))
        # A span of one pixel reflects everything to 0 (eager's `empty`).
        return m.where(Op("le", (IndexValue(self.size, "int64"), Const(1, "int64")), "bool"), m.c(0), reflected)

    def pad(self, v: Node) -> Node:
        """Eager's compute_coordinates: the padding mode applied to an unnormalised coordinate."""
        if self.padding == BORDER:
            return self.clip(v)
        if self.padding == REFLECTION:
            return self.clip(self.reflect(v))
        return v

    def tap(self, v: Node, past_end: bool = False) -> tuple[Node, Node | None]:
        """(position to load, inside?) of an integral coordinate after padding: inside? is None where the
        padding mode keeps it inside (`past_end`: except that it may be size, bilinear's east and south
        neighbours of the last pixel). The position is clamped in float before the conversion to int64, so a
        far-off, infinite or NaN coordinate never becomes an index outside the input (or a wrapped one)."""
        m = self.m
        inside = m.cmp("lt", v, m.size(self.size)) if past_end or self.padding == ZEROS else None
        if self.padding == ZEROS:
            inside = m.both(m.cmp("gt", v, m.c(-1)), inside)
        return cast(self.clip(v), "int64"), inside


def _gather(x: TensorValue, lead: tuple, y_pos: Node, x_pos: Node, what: str) -> Node:
    """x[lead..., y_pos, x_pos] with both positions from data (already inside the input)."""
    vy, vx = sympy.Symbol("x2", integer=True), sympy.Symbol("x3", integer=True)
    node = x.loader((*lead, vy, vx))
    node = attach_indirect(node, Indirect(vy, y_pos, x.shape[2], False, what))
    return attach_indirect(node, Indirect(vx, x_pos, x.shape[3], False, what))


def _cubic_coefficients(m: _Math, t: Node) -> list[Node]:
    """Eager's get_cubic_coefficients: the weights of the taps at -1, 0, 1, 2 from the floor, t in [0, 1)."""
    a = m.c(CUBIC_A)

    def far(s: Node) -> Node:  # 1 < s < 2
        return m.sub(m.mul(m.add(m.mul(m.sub(m.mul(a, s), m.mul(m.c(5), a)), s), m.mul(m.c(8), a)), s),
                     m.mul(m.c(4), a))

    def near(s: Node) -> Node:  # s <= 1
        return m.add(m.mul(m.mul(m.sub(m.mul(m.add(a, m.c(2)), s), m.add(a, m.c(3))), s), s), m.c(1))

    return [far(m.add(t, m.c(1))), near(t), near(m.sub(m.c(1), t)), far(m.sub(m.c(2), t))]


def _weighted_sum(m: _Math, terms: list[tuple[Node, Node]]) -> Node:
    """((v0 * w0 + v1 * w1) + v2 * w2) + ...: eager's order of additions."""
    total: Node | None = None
    for value, weight in terms:
        product = m.mul(value, weight)
        total = product if total is None else m.add(total, product)
    assert total is not None
    return total


def _masked(m: _Math, inside: Node | None, value: Node) -> Node:
    return value if inside is None else m.where(inside, value, m.c(0))


@lowers(aten.grid_sampler_2d.default)
def _grid_sampler_2d(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, grid: TensorValue,
                     interpolation_mode: int, padding_mode: int, align_corners: bool) -> TensorValue:
    interpolation_mode, padding_mode = int(interpolation_mode), int(padding_mode)
    if not is_float(x.dtype) or interpolation_mode not in (BILINEAR, NEAREST, BICUBIC) \
            or padding_mode not in (ZEROS, BORDER, REFLECTION):
        raise UnsupportedError(f"grid_sample at {ctx.where()}: {x.dtype} input with interpolation mode "
                               f"{interpolation_mode} and padding mode {padding_mode}; aotpack lowers float inputs "
                               "with bilinear, nearest or bicubic interpolation and zeros, border or reflection padding")
    out_shape = ctx.shape_of(node)
    dtype = x.dtype
    m = _Math(compute_dtype(dtype))
    # Each output element gathers up to 16 input elements at positions read from data: a lazy input is
    # computed into memory once (a position from data is bound only in a load's index: index.py's addressable),
    # and a lazy grid too, which every channel reads.
    x = x if x.view is not None else ctx.realize(x)
    grid = grid if grid.view is not None else ctx.realize(grid)
    rows = _Axis(m, x.shape[2], padding_mode, bool(align_corners))
    cols = _Axis(m, x.shape[3], padding_mode, bool(align_corners))
    what = f"grid_sample at {ctx.where()}: a position is outside the input (an aotpack bug: positions are clamped)"

    def load(idx: tuple) -> Node:
        n, c, ho, wo = idx
        gx = cast(grid.loader((n, ho, wo, sympy.Integer(0))), m.dtype)
        gy = cast(grid.loader((n, ho, wo, sympy.Integer(1))), m.dtype)

        def read(y: Node, x_: Node, south: bool = False, east: bool = False) -> Node:
            """The input at integral coordinates (y, x_) after padding: 0 outside the input."""
            y_pos, y_in = rows.tap(y, south)
            x_pos, x_in = cols.tap(x_, east)
            return _masked(m, m.both(y_in, x_in), cast(_gather(x, (n, c), y_pos, x_pos, what), m.dtype))

        if interpolation_mode == NEAREST:
            value = read(m.op("round", rows.pad(rows.unnormalize(gy))), m.op("round", cols.pad(cols.unnormalize(gx))))
        elif interpolation_mode == BILINEAR:
            sx, sy = cols.pad(cols.unnormalize(gx)), rows.pad(rows.unnormalize(gy))
            west, north = m.op("floor", sx), m.op("floor", sy)
            east, south = m.add(west, m.c(1)), m.add(north, m.c(1))
            w = m.sub(sx, west)
            e = m.sub(m.c(1), w)
            nn = m.sub(sy, north)
            s = m.sub(m.c(1), nn)
            value = _weighted_sum(m, [(read(north, west), m.mul(s, e)), (read(north, east, east=True), m.mul(s, w)),
                                      (read(south, west, south=True), m.mul(nn, e)),
                                      (read(south, east, south=True, east=True), m.mul(nn, w))])
        else:
            # Bicubic: the taps around the floor of the unpadded coordinate, each tap through the padding mode.
            sx, sy = cols.unnormalize(gx), rows.unnormalize(gy)
            fx, fy = m.op("floor", sx), m.op("floor", sy)
            wx, wy = _cubic_coefficients(m, m.sub(sx, fx)), _cubic_coefficients(m, m.sub(sy, fy))
            row_values = []
            for i in range(4):
                ty = rows.pad(m.add(fy, m.c(i - 1)))
                row_values.append(_weighted_sum(m, [(read(ty, cols.pad(m.add(fx, m.c(j - 1)))), wx[j])
                                                    for j in range(4)]))
            value = _weighted_sum(m, list(zip(row_values, wy)))
        return cast(value, dtype)

    return TensorValue(dtype, out_shape, load)


@lowers(aten.grid_sampler_3d.default)
def _grid_sampler_3d(ctx: GraphLowering, node: torch.fx.Node, *args: Any) -> TensorValue:
    raise UnsupportedError(f"grid_sample at {ctx.where()}: a 5-d input (grid_sampler_3d, volumetric sampling) is not "
                           "lowered; aotpack lowers grid_sample of 4-d inputs (N, C, H, W) with a 4-d grid")
