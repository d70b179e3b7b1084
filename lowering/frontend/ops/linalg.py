"""Matmul and convolution: template kernels reading strided views of buffers or gathered expressions."""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from ....errors import UnsupportedError
from ...ir.kernels import GatheredOperand, MatmulKernel, Operand, StridedView, operand_vars
from ...ir.scalar import Const, IndexValue, Load, Op, cast
from .. import values as V
from ..graph import GraphLowering
from ..registry import OptionalOps, lowers
from ..values import TensorValue

aten = OptionalOps(torch.ops.aten)


def _batched_view(ctx: GraphLowering, x: TensorValue) -> StridedView:
    """A [batch, rows, cols] view of a 2-D or 3-D operand (batch stride 0 for 2-D)."""
    view = ctx.as_view(x)
    if x.rank == 2:
        return StridedView(view.buffer, view.offset, (sympy.Integer(0),) + view.strides)
    return view


# Dtypes whose matmul kernels (templates/cpp/matmul.cpp.jinja, templates/triton/matmul.py.jinja) evaluate a
# gathered operand while loading tiles; the integer and float64 CPU kernel (matmul_generic) reads memory only.
GATHER_DTYPES = ("float32", "float16", "bfloat16")


def can_gather(operand_dtype: str, out_dtype: str) -> bool:
    return operand_dtype in GATHER_DTYPES and out_dtype in GATHER_DTYPES


def _operand(ctx: GraphLowering, x: TensorValue, gather: bool, out_dtype: str) -> Operand:
    """x as a [batch, rows, cols] operand: a strided view of memory, or with `gather` a lazy x's own
    expression, which the kernel evaluates tile by tile instead of reading a buffer written for it first.
    A widened load (a half value stored narrow and read as float32, graph.py `_realize_narrow`) is always
    gathered: writing a float32 copy for the product would undo storing it narrow."""
    g0, g1, g2 = operand_vars()
    element = x.loader((g0, g1, g2) if x.rank == 3 else (g1, g2)) if x.view is None else None
    widened = (isinstance(element, Op) and element.name == "cast" and isinstance(element.args[0], Load)
               and not element.args[0].indirect)
    if x.view is not None or not (gather or widened) or not can_gather(x.dtype, out_dtype):
        return _batched_view(ctx, x)
    return GatheredOperand(cast(element, x.dtype))


def matmul(ctx: GraphLowering, node: torch.fx.Node, a: TensorValue, b: TensorValue) -> TensorValue:
    return matmul_values(ctx, a, b, ctx.dtype_of(node))


def matmul_values(ctx: GraphLowering, a: TensorValue, b: TensorValue, out_dtype: str, *,
                  gather_a: bool = False, gather_b: bool = False) -> TensorValue:
    """a @ b for 2-d or 3-d (batched) operands, into a new buffer.

    A lazy operand is computed into memory first, unless `gather_a`/`gather_b` asks the kernel to evaluate its
    expression as it loads each tile (GatheredOperand): worth it when the expression is cheap to repeat for
    every tile that reads it (one affine load, as convolution's columns are) and large to store."""
    if a.dtype != b.dtype:
        raise UnsupportedError(f"matmul of {a.dtype} and {b.dtype}: both operands must have the same dtype")
    batch = a.shape[0] if a.rank == 3 else (b.shape[0] if b.rank == 3 else sympy.Integer(1))
    shape = ((batch,) if a.rank == 3 or b.rank == 3 else ()) + (a.shape[-2], b.shape[-1])
    out = ctx.new_buffer(out_dtype, shape)
    kernel = MatmulKernel(
        output=out, a=_operand(ctx, a, gather_a, out_dtype), b=_operand(ctx, b, gather_b, out_dtype),
        batch=batch, m=a.shape[-2], n=b.shape[-1], k=a.shape[-1], dtype=out_dtype,
    )
    ctx.add_step(kernel)
    return V.from_buffer(out, out_dtype, shape)


@lowers(aten.mm.default, aten.bmm.default)
def _mm(ctx: GraphLowering, node: torch.fx.Node, a: TensorValue, b: TensorValue) -> TensorValue:
    return matmul(ctx, node, a, b)


@lowers(aten.addmm.default)
def _addmm(ctx: GraphLowering, node: torch.fx.Node, bias: TensorValue, a: TensorValue, b: TensorValue,
           *, beta: Any = 1, alpha: Any = 1) -> TensorValue:
    from ...ir.scalar import Const, Op
    from .pointwise import elementwise

    # torch's addmm (cuBLAS's epilogue, as the CPU kernels) adds the bias to the float32 sum and rounds once:
    # a half product stays float32 until the add, which a fused epilogue then computes on the accumulator
    # (rounding the product to half first, then the sum again, doubled eager's error on bf16 models).
    out_dtype = ctx.dtype_of(node)
    accumulate = "float32" if out_dtype in ("float16", "bfloat16") else out_dtype
    product = matmul_values(ctx, a, b, accumulate)

    def fn(p: Any, c: Any) -> Any:
        if alpha != 1:
            p = Op("mul", (p, Const(float(alpha), p.dtype)), p.dtype)
        if beta != 1:
            c = Op("mul", (c, Const(float(beta), c.dtype)), c.dtype)
        return Op("add", (p, c), p.dtype)

    return elementwise(ctx, node, [product, bias], fn, compute=accumulate)


def per_dim(value: Any, rank: int) -> tuple[int, ...]:
    """A convolution or pooling argument given once or once per spatial dim (stride, padding, ...), once per
    spatial dim; an empty list (ATen's default for a padding) is 0 for each."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return tuple(int(v) for v in (values * rank if len(values) == 1 else values or [0] * rank))


def _lifted(values: tuple[int, ...], fill: int) -> tuple[int, ...]:
    """A convolution's per-dim values as those of the convolution it runs as: a 1-d one runs as 2-d with a
    height of 1, whose value is `fill` (1 for a stride or dilation, 0 for padding); 2-d and 3-d as they are."""
    return (fill, values[0]) if len(values) == 1 else values


@lowers(aten.convolution.default)
def _convolution(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, weight: TensorValue, bias: Any,
                 stride: Any, padding: Any, dilation: Any, transposed: bool, output_padding: Any,
                 groups: int) -> TensorValue:
    """Convolution (1-d, 2-d, 3-d) on the matrix product (`direct_convolution`); a transposed one as the
    direct convolutions it equals (`_subpixel`, or `_transposed_as_direct` where it is dilated). The bias and
    the NC(D)HW layout of the result stay lazy and fuse into its reader."""
    spatial = x.rank - 2
    if spatial not in (1, 2, 3):
        kind = "transposed convolution" if transposed else "convolution"
        raise UnsupportedError(f"{spatial}-d {kind} is not supported (1-d, 2-d and 3-d are); fold the extra "
                               "spatial dims into the batch")
    if any(not s.is_number for s in weight.shape):
        raise UnsupportedError("a convolution weight must have a fixed shape")
    out_shape, out_dtype = ctx.shape_of(node), ctx.dtype_of(node)
    product_dtype = x.dtype if x.dtype == weight.dtype else out_dtype
    strides, dilations = per_dim(stride, spatial), per_dim(dilation, spatial)
    if transposed and all(d == 1 for d in dilations) and any(s > 1 for s in strides):
        result = _subpixel(ctx, x, weight, strides, per_dim(padding, spatial), int(groups), out_shape, product_dtype)
    else:
        pads = per_dim(padding, spatial)
        if transposed:
            x, weight = _transposed_as_direct(x, weight, stride, padding, dilation, output_padding, int(groups))
            strides, pads = (1,) * spatial, (0,) * spatial
        result = direct_convolution(ctx, x, weight, strides, pads, dilations, int(groups), out_shape[2:], product_dtype)

    def load(idx: tuple) -> Any:
        value = result.loader(idx)
        if bias is not None:
            value = Op("add", (value, cast(bias.loader((idx[1],)), value.dtype)), value.dtype)
        return cast(value, out_dtype)

    return TensorValue(out_dtype, out_shape, load)


def direct_convolution(ctx: GraphLowering, x: TensorValue, weight: TensorValue, strides: tuple[int, ...],
                       pads: tuple[int, ...], dilations: tuple[int, ...], groups: int,
                       out_sizes: tuple[sympy.Expr, ...], out_dtype: str) -> TensorValue:
    """x [n, c_in, spatial...] convolved with weight [c_out, c_in/groups, k...] (no bias) as a matrix
    product: one column per output position, one row per input channel and kernel tap, so it runs on the
    matmul kernel. The columns are a gather from the input, zero padded once beforehand, that the matmul
    evaluates as it loads each tile (implicit GEMM: the kernel-size times larger column matrix is never
    stored). A 3-d convolution is the same product with kd * kh * kw taps a channel and n * od * oh * ow
    columns: a video transformer's patch embedding (kernel == stride) is one product over its patches."""
    spatial = x.rank - 2
    implicit = can_gather(x.dtype, out_dtype)
    if spatial == 1:  # run 1-d as 2-d with a height of 1
        x, weight = V.unsqueeze(x, 2), V.unsqueeze(weight, 2)
    strides, dilations, pads = _lifted(strides, 1), _lifted(dilations, 1), _lifted(pads, 0)
    c_out, c_group = int(weight.shape[0]), int(weight.shape[1])
    kernel = tuple(int(s) for s in weight.shape[2:])
    window = math.prod(kernel)
    if x.view is None and (implicit or window > 1 or any(pads)):
        # The columns read each input element once per tap: compute it once. Computed before padding, where
        # its own loads stay free of the padding's clamps and vectorise. With implicit GEMM even a 1x1
        # convolution's input is computed first, so that the columns are one affine load (below).
        x = ctx.realize(x)
    if any(pads):
        # Padded in memory (one pass over the input, not one per tap) rather than by a select in the matmul's
        # tile loads: every tap then lies inside the padded input, so a column element is one load at an
        # offset affine in the tap and in the output position, with no clamp or select. Triton's tile load
        # stays a plain load, and the CPU kernel splits the offset into a per-row and a per-column part,
        # reading the columns straight into its packed panels (templates/cpp/matmul.cpp.jinja).
        x = ctx.realize(_zero_padded(x, pads))
    n = x.shape[0]
    g = groups
    grid = (sympy.Integer(1), *out_sizes) if spatial == 1 else tuple(out_sizes)
    taps = c_group * window
    # The tap t = (c, a...) of a channel: c = t // window, a_d = (t // (product of the kernel after d)) % k_d.
    tap_strides = tuple(math.prod(kernel[d + 1:]) for d in range(len(kernel)))

    # cols[group, (c, a...), n, o...]: output positions innermost, so the gather reads rows of x in order.
    def column(idx: tuple) -> Any:
        gi, t, ni, out = idx[0], idx[1], idx[2], idx[3:]
        c = FloorDiv(t, window)
        position = tuple(o * s + ModularIndexing(t, ts, k) * dl
                         for o, s, ts, k, dl in zip(out, strides, tap_strides, kernel, dilations))
        return x.loader((ni, gi * c_group + c, *position))

    cols = TensorValue(x.dtype, (sympy.Integer(g), sympy.Integer(taps), n, *grid), column)
    if not implicit:
        # The integer and float64 CPU matmul reads memory only: im2col, the column buffer written by one
        # elementwise kernel whose loops follow (n, o...), so it needs no division per element.
        cols = ctx.realize(cols)
    cols = V.reshape(cols, (sympy.Integer(g), sympy.Integer(taps), n * math.prod(grid)))
    # The weight [g * c_out/g, c_group, k...] is the left operand, [g, c_out/g, taps], so the product
    # [g, c_out/g, (n, o...)] is channel-major: readers of the NC(D)HW result (pooling, batch norm) read
    # contiguous rows, and the columns are the right operand's rows, copied into panels without transposing.
    w_mat = V.reshape(weight, (sympy.Integer(g), sympy.Integer(c_out // g), sympy.Integer(taps)))
    product = matmul_values(ctx, w_mat, cols, out_dtype, gather_b=True)

    def load(idx: tuple) -> Any:  # out[n, co, o...] = product[co // (c_out/g), co % (c_out/g), (n, o...)]
        ni, co = idx[0], idx[1]
        r = ni
        for o, size in zip((sympy.Integer(0), idx[2]) if spatial == 1 else idx[2:], grid):
            r = r * size + o
        return product.loader((FloorDiv(co, c_out // g), ModularIndexing(co, 1, c_out // g), r))

    return TensorValue(out_dtype, (n, sympy.Integer(c_out), *out_sizes), load)


def _subpixel(ctx: GraphLowering, x: TensorValue, weight: TensorValue, strides: tuple[int, ...],
              padding: tuple[int, ...], groups: int, out_shape: tuple[sympy.Expr, ...],
              out_dtype: str) -> TensorValue:
    """A strided transposed convolution (no dilation) as one direct convolution with a channel per output
    phase, so that no multiplication is by a stuffed zero. Along a dim of stride s, the output o takes
    x[q - t] * w[r + s t] over t, where r = (o + p) % s is its phase and q = (o + p) // s: per phase a
    stride-1 convolution of x with the taps r, r + s, ... reversed (T = ceil(k / s) of them; past the kernel,
    zeros). Every phase has the same shape, so the s^d phases of a channel are s^d output channels of one
    product over x padded by T, read back at q + 1 in phase r: the transposed form's multiplications, where
    the zero-stuffed input (`_transposed_as_direct`) takes s^d times as many."""
    spatial = x.rank - 2
    c_in, per_group = int(weight.shape[0]), int(weight.shape[1])
    c_in_group = c_in // groups
    kernel = [int(weight.shape[d]) for d in range(2, weight.rank)]
    taps = [-(-k // s) for k, s in zip(kernel, strides)]
    phases = math.prod(strides)
    # the flat phase's digits: r_d = (phase // (product of the strides after d)) % s_d
    digit = [math.prod(strides[d + 1:]) for d in range(spatial)]

    def phased(idx: tuple) -> Any:  # w'[(g, phase, co), ci, t...] = w[g * c_in_group + ci, co, r + s (T - 1 - t)...]
        oc, ci = idx[0], idx[1]
        g, co = FloorDiv(oc, phases * per_group), ModularIndexing(oc, 1, per_group)
        at, inside = [], None
        for d in range(spatial):
            a = ModularIndexing(oc, per_group * digit[d], strides[d]) + strides[d] * (taps[d] - 1 - idx[2 + d])
            at.append(sympy.Min(a, kernel[d] - 1))
            if (taps[d] - 1) * strides[d] + strides[d] - 1 >= kernel[d]:  # some phase reaches past the kernel
                test = Op("lt", (IndexValue(a, "int64"), Const(kernel[d], "int64")), "bool")
                inside = test if inside is None else Op("logical_and", (inside, test), "bool")
        value = weight.loader((g * c_in_group + ci, co, *at))
        return value if inside is None else Op("where", (inside, value, cast(Const(0, "int64"), weight.dtype)),
                                                weight.dtype)

    w_phased = TensorValue(weight.dtype, (sympy.Integer(groups * phases * per_group), sympy.Integer(c_in_group),
                                          *(sympy.Integer(t) for t in taps)), phased)
    sizes = tuple(x.shape[2 + d] + taps[d] + 1 for d in range(spatial))
    z = direct_convolution(ctx, x, w_phased, (1,) * spatial, tuple(taps), (1,) * spatial, groups, sizes, out_dtype)

    def load(idx: tuple) -> Any:  # out[n, g * per_group + co, o...] = z[n, (g, phase, co), q + 1...]
        ni, c = idx[0], idx[1]
        shifted = [o + p for o, p in zip(idx[2:], padding)]
        phase = sum(ModularIndexing(v, 1, s) * dg for v, s, dg in zip(shifted, strides, digit))
        channel = (FloorDiv(c, per_group) * phases + phase) * per_group + ModularIndexing(c, 1, per_group)
        return z.loader((ni, channel, *(FloorDiv(v, s) + 1 for v, s in zip(shifted, strides))))

    return TensorValue(out_dtype, (out_shape[0], out_shape[1], *out_shape[2:]), load)


def _transposed_as_direct(x: TensorValue, weight: TensorValue, stride: Any, padding: Any, dilation: Any,
                          output_padding: Any, groups: int) -> tuple[TensorValue, TensorValue]:
    """A transposed convolution (ConvTranspose) as the direct convolution it equals, stride 1 and no padding:
    its input with stride - 1 zeros between neighbours and dilation * (kernel - 1) - padding zeros around
    (output_padding more at the end; a negative count crops), and its weight [c_in, c_out/g, k...] as
    [c_out, c_in/g, k...] with the taps reversed. The zeros are multiplied like any input (stride x stride
    times the work of the transposed form); in exchange it runs on the implicit-GEMM convolution as it is."""
    spatial = x.rank - 2
    dims = range(2, x.rank)
    strides, dilations = per_dim(stride, spatial), per_dim(dilation, spatial)
    extra = per_dim(output_padding, spatial)
    kernel = [int(weight.shape[d]) for d in dims]
    before = [dl * (k - 1) - p for dl, k, p in zip(dilations, kernel, per_dim(padding, spatial))]
    sizes = [(x.shape[d] - 1) * s + 1 + 2 * b + e for d, s, b, e in zip(dims, strides, before, extra)]

    def stuffed(idx: tuple) -> Any:
        inside, position = [], []
        for i, s, b, d in zip(idx[2:], strides, before, dims):
            j = i - b  # position in the input with stride - 1 zeros between neighbours
            last = (x.shape[d] - 1) * s
            jc = sympy.Max(0, sympy.Min(j, last))
            inside.append(Op("eq", (IndexValue(j - jc, "int64"), Const(0, "int64")), "bool"))
            if s > 1:
                inside.append(Op("eq", (IndexValue(ModularIndexing(jc, 1, s), "int64"), Const(0, "int64")), "bool"))
            position.append(FloorDiv(jc, s))
        mask = inside[0]
        for test in inside[1:]:
            mask = Op("logical_and", (mask, test), "bool")
        value = x.loader((idx[0], idx[1], *position))
        return Op("where", (mask, value, cast(Const(0, "int64"), x.dtype)), x.dtype)

    c_in, per_group = int(weight.shape[0]), int(weight.shape[1])
    c_in_group = c_in // groups

    def flipped(idx: tuple) -> Any:  # w'[g * per_group + co, ci, a...] = w[g * c_in_group + ci, co, k - 1 - a...]
        co, ci = idx[0], idx[1]
        g = FloorDiv(co, per_group)
        taps = tuple(k - 1 - a for k, a in zip(kernel, idx[2:]))
        return weight.loader((g * c_in_group + ci, ModularIndexing(co, 1, per_group), *taps))

    x_direct = TensorValue(x.dtype, (x.shape[0], x.shape[1], *sizes), stuffed)
    w_direct = TensorValue(weight.dtype, (sympy.Integer(groups * per_group), sympy.Integer(c_in_group),
                                          *(sympy.Integer(k) for k in kernel)), flipped)
    return x_direct, w_direct


def _zero_padded(x: TensorValue, padding: tuple[int, ...]) -> TensorValue:
    """x [n, c, spatial...] with `padding` zeros on both sides of each spatial dim."""
    sizes = x.shape[2:]

    def load(idx: tuple) -> Any:
        shifted = [i - p for i, p in zip(idx[2:], padding)]
        value = x.loader((idx[0], idx[1], *(sympy.Max(0, sympy.Min(i, s - 1)) for i, s in zip(shifted, sizes))))
        inside = _in_range(shifted[0], sizes[0])
        for i, s in zip(shifted[1:], sizes[1:]):
            inside = Op("logical_and", (inside, _in_range(i, s)), "bool")
        return Op("where", (inside, value, cast(Const(0, "int64"), x.dtype)), x.dtype)

    return TensorValue(x.dtype, (*x.shape[:2], *(s + 2 * p for s, p in zip(sizes, padding))), load)


def _in_range(i: sympy.Expr, size: sympy.Expr) -> Any:
    ge = Op("ge", (IndexValue(i, "int64"), Const(0, "int64")), "bool")
    lt = Op("lt", (IndexValue(i, "int64"), IndexValue(size, "int64")), "bool")
    return Op("logical_and", (ge, lt), "bool")
