"""Elementwise ops: broadcasting, type promotion, and the scalar op each ATen op becomes.

Every op here returns a lazy TensorValue, so chains of them become one kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ....errors import UnsupportedError
from ...ir.dtypes import is_float
from ...ir.scalar import Const, IndexValue, Load, Node, Op, cast
from .. import symbolic_scalars
from ..graph import GraphLowering, dtype_name
from ..registry import OptionalOps, lowers
from ..values import TensorValue, broadcast_to

aten = OptionalOps(torch.ops.aten)
prims = OptionalOps(torch.ops.prims)

Operand = Any  # TensorValue, a Python number, or a sympy size expression


def scalar_node(value: Any, dtype: str) -> Node:
    """A scalar operand (a Python number, a size, arithmetic on sizes) in the dtype an op computes in."""
    return cast(symbolic_scalars.operand(value), dtype)


def _meta(value: Operand) -> Any:
    """A stand-in for torch.result_type: a meta tensor of the right dtype and dimensionality, or the scalar."""
    if isinstance(value, TensorValue):
        dtype = getattr(torch, value.dtype)
        return torch.empty([1] * min(value.rank, 1), dtype=dtype, device="meta")
    if isinstance(value, sympy.Expr):
        return 1
    if isinstance(value, (Load, Const, IndexValue, Op)):  # a float or bool computed from sizes, promoted as one
        return 1.0 if is_float(value.dtype) else True if value.dtype == "bool" else 1
    return value


def promoted_dtype(operands: Sequence[Operand]) -> str:
    """The dtype PyTorch's type promotion gives these operands (what comparisons compute in)."""
    metas = [_meta(v) for v in operands]
    _, result = elementwise_dtypes(*metas, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return dtype_name(result)


def elementwise(
    ctx: GraphLowering,
    node: torch.fx.Node,
    operands: Sequence[Operand],
    fn: Callable[..., Node],
    compute: str | None = None,
) -> TensorValue:
    """out[i] = fn(operands[i]...), broadcast to the node's shape, operands cast to `compute` first."""
    out_dtype = ctx.dtype_of(node)
    shape = ctx.shape_of(node)
    compute = compute or out_dtype
    parts: list[Callable[[tuple], Node]] = []
    for operand in operands:
        if isinstance(operand, TensorValue):
            loader = broadcast_to(operand, shape).loader
            parts.append(lambda idx, loader=loader: cast(loader(idx), compute))
        else:
            const = scalar_node(operand, compute)
            parts.append(lambda idx, const=const: const)
    return TensorValue(out_dtype, shape, lambda idx: cast(fn(*[p(idx) for p in parts]), out_dtype))


def op(name: str) -> Callable[..., Node]:
    return lambda *args: Op(name, tuple(args), args[0].dtype)


def _register_simple(name: str, *targets: Any) -> None:
    @lowers(*targets)
    def lower(ctx: GraphLowering, node: torch.fx.Node, *args: Any, **kwargs: Any) -> TensorValue:
        return elementwise(ctx, node, args[: _arity(name)], op(name))


_UNARY = {
    "neg": [aten.neg, prims.neg], "abs": [aten.abs, prims.abs], "exp": [aten.exp, prims.exp],
    "exp2": [aten.exp2], "expm1": [aten.expm1, prims.expm1], "log": [aten.log, prims.log],
    "log2": [aten.log2, prims.log2], "log10": [aten.log10, prims.log10], "log1p": [aten.log1p, prims.log1p],
    "sqrt": [aten.sqrt, prims.sqrt], "rsqrt": [aten.rsqrt, prims.rsqrt], "sin": [aten.sin, prims.sin],
    "cos": [aten.cos, prims.cos], "tan": [aten.tan, prims.tan], "asin": [aten.asin, prims.asin],
    "acos": [aten.acos, prims.acos], "atan": [aten.atan, prims.atan], "sinh": [aten.sinh, prims.sinh],
    "cosh": [aten.cosh, prims.cosh], "tanh": [aten.tanh, prims.tanh], "asinh": [aten.asinh, prims.asinh],
    "acosh": [aten.acosh, prims.acosh], "atanh": [aten.atanh, prims.atanh], "erf": [aten.erf, prims.erf],
    "erfc": [aten.erfc, prims.erfc], "lgamma": [aten.lgamma, prims.lgamma], "sigmoid": [aten.sigmoid],
    "reciprocal": [aten.reciprocal, prims.reciprocal],
    "floor": [aten.floor, prims.floor], "ceil": [aten.ceil, prims.ceil], "round": [aten.round.default, prims.round],
    "trunc": [aten.trunc, prims.trunc], "sign": [aten.sign, prims.sign, aten.sgn], "relu": [aten.relu],
    "bitwise_not": [aten.bitwise_not, prims.bitwise_not],
}
_BINARY = {
    "mul": [aten.mul, prims.mul], "maximum": [aten.maximum, prims.maximum], "minimum": [aten.minimum, prims.minimum],
    "atan2": [aten.atan2, prims.atan2], "fmod": [aten.fmod, prims.fmod], "remainder": [aten.remainder, prims.remainder],
    "bitwise_and": [aten.bitwise_and, prims.bitwise_and], "bitwise_or": [aten.bitwise_or, prims.bitwise_or],
    "bitwise_xor": [aten.bitwise_xor, prims.bitwise_xor], "hypot": [aten.hypot, prims.hypot],
    "copysign": [aten.copysign], "fmax": [aten.fmax, prims.fmax], "fmin": [aten.fmin, prims.fmin],
}


def _arity(name: str) -> int:
    return 1 if name in _UNARY else 2


for _name, _targets in {**_UNARY, **_BINARY}.items():
    _register_simple(_name, *_targets)


@lowers(aten.add, prims.add, aten.sub, prims.sub, aten.rsub)
def _add_sub(ctx: GraphLowering, node: torch.fx.Node, a: Operand, b: Operand, alpha: Any = 1) -> TensorValue:
    packet = getattr(node.target, "overloadpacket", node.target)
    if packet in (aten.rsub,):
        a, b = b, a
    name = "add" if packet in (aten.add, prims.add) else "sub"

    def fn(x: Node, y: Node) -> Node:
        if alpha != 1:
            y = Op("mul", (y, scalar_node(alpha, y.dtype)), y.dtype)
        return Op(name, (x, y), x.dtype)

    return elementwise(ctx, node, [a, b], fn)


@lowers(aten.div.Tensor, aten.div.Scalar, aten.true_divide)
def _div(ctx: GraphLowering, node: torch.fx.Node, a: Operand, b: Operand) -> TensorValue:
    return elementwise(ctx, node, [a, b], op("div"))


@lowers(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(ctx: GraphLowering, node: torch.fx.Node, a: Operand, b: Operand, rounding_mode: str | None = None) -> TensorValue:
    if rounding_mode is None:
        return elementwise(ctx, node, [a, b], op("div"))
    out = ctx.dtype_of(node)
    if is_float(out):
        rounding = "floor" if rounding_mode == "floor" else "trunc"
        return elementwise(ctx, node, [a, b], lambda x, y: Op(rounding, (Op("div", (x, y), x.dtype),), x.dtype))
    return elementwise(ctx, node, [a, b], op("floordiv" if rounding_mode == "floor" else "truncdiv"))


@lowers(prims.div)
def _prims_div(ctx: GraphLowering, node: torch.fx.Node, a: Operand, b: Operand) -> TensorValue:
    # prims.div truncates integers (C semantics) and divides floats exactly.
    name = "div" if is_float(ctx.dtype_of(node)) else "truncdiv"
    return elementwise(ctx, node, [a, b], op(name))


@lowers(aten.floor_divide)
def _floor_divide(ctx: GraphLowering, node: torch.fx.Node, a: Operand, b: Operand) -> TensorValue:
    return _div_mode(ctx, node, a, b, "floor")


def _product(factors: list[Node]) -> Node:
    out = factors[0]
    for f in factors[1:]:
        out = Op("mul", (out, f), out.dtype)
    return out


@lowers(aten.pow, prims.pow)
def _pow(ctx: GraphLowering, node: torch.fx.Node, a: Operand, b: Operand) -> TensorValue:
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        if b in (2, 3, 4) and is_float(ctx.dtype_of(node)):
            # small whole powers as products: exact to an ulp, and vectorisable where libm's pow is a call
            return elementwise(ctx, node, [a], lambda x: _product([x] * int(b)))
        if b == 2:
            return elementwise(ctx, node, [a], lambda x: Op("mul", (x, x), x.dtype))
        if b == 0.5 and is_float(ctx.dtype_of(node)):
            return elementwise(ctx, node, [a], op("sqrt"))
        if b == 1:
            return elementwise(ctx, node, [a], lambda x: x)
    return elementwise(ctx, node, [a, b], op("pow"))


_COMPARE = {"eq": [aten.eq, prims.eq], "ne": [aten.ne, prims.ne], "lt": [aten.lt, prims.lt],
            "le": [aten.le, prims.le], "gt": [aten.gt, prims.gt], "ge": [aten.ge, prims.ge]}


def _register_compare(name: str, targets: list[Any]) -> None:
    @lowers(*targets)
    def lower(ctx: GraphLowering, node: torch.fx.Node, a: Operand, b: Operand) -> TensorValue:
        compute = promoted_dtype([a, b])
        return elementwise(ctx, node, [a, b], lambda x, y: Op(name, (x, y), "bool"), compute)


for _name, _targets in _COMPARE.items():
    _register_compare(_name, _targets)


def _register_logical(name: str, target: Any, arity: int) -> None:
    @lowers(target)
    def lower(ctx: GraphLowering, node: torch.fx.Node, *args: Any) -> TensorValue:
        return elementwise(ctx, node, args[:arity], lambda *xs: Op(name, tuple(xs), "bool"), "bool")


_register_logical("logical_and", aten.logical_and, 2)
_register_logical("logical_or", aten.logical_or, 2)
_register_logical("logical_xor", aten.logical_xor, 2)
_register_logical("logical_not", aten.logical_not, 1)


@lowers(aten.signbit, prims.signbit)
def _signbit(ctx: GraphLowering, node: torch.fx.Node, a: TensorValue) -> TensorValue:
    # Computed in the input's dtype: casting to the bool result first would lose the sign.
    return elementwise(ctx, node, [a], lambda x: Op("signbit", (x,), "bool"), a.dtype)


@lowers(aten.isnan, prims.isnan, aten.isinf, prims.isinf, aten.isfinite, aten.isposinf, aten.isneginf)
def _float_class(ctx: GraphLowering, node: torch.fx.Node, a: TensorValue) -> TensorValue:
    name = getattr(node.target, "overloadpacket", node.target).__name__.split(".")[-1]
    if not is_float(a.dtype):  # integers are never nan or inf
        value = name == "isfinite"
        return elementwise(ctx, node, [a], lambda x: Const(value, "bool"), a.dtype)
    return elementwise(ctx, node, [a], lambda x: Op(name, (x,), "bool"), a.dtype)


@lowers(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar, prims.where)
def _where(ctx: GraphLowering, node: torch.fx.Node, cond: Operand, a: Operand, b: Operand) -> TensorValue:
    out = ctx.dtype_of(node)

    def fn(c: Node, x: Node, y: Node) -> Node:
        return Op("where", (cast(c, "bool"), cast(x, out), cast(y, out)), out)

    return _mixed(ctx, node, [cond, a, b], fn)


def _mixed(ctx: GraphLowering, node: torch.fx.Node, operands: Sequence[Operand], fn: Callable[..., Node]) -> TensorValue:
    """Like elementwise, but each operand keeps its own dtype (fn casts)."""
    out_dtype = ctx.dtype_of(node)
    shape = ctx.shape_of(node)
    parts = []
    for operand in operands:
        if isinstance(operand, TensorValue):
            parts.append(broadcast_to(operand, shape).loader)
        else:
            const = scalar_node(operand, out_dtype)
            parts.append(lambda idx, const=const: const)
    return TensorValue(out_dtype, shape, lambda idx: cast(fn(*[p(idx) for p in parts]), out_dtype))


@lowers(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, mask: TensorValue, value: Operand) -> TensorValue:
    return _where(ctx, node, mask, value, x)


@lowers(aten.clamp, aten.clamp_min, aten.clamp_max, aten.clip)
def _clamp(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, *bounds: Any) -> TensorValue:
    packet = getattr(node.target, "overloadpacket", node.target)
    if packet is aten.clamp_min:
        lo, hi = bounds[0], None
    elif packet is aten.clamp_max:
        lo, hi = None, bounds[0]
    else:
        lo = bounds[0] if bounds else None
        hi = bounds[1] if len(bounds) > 1 else None
    operands = [x] + [b for b in (lo, hi) if b is not None]

    def fn(v: Node, *limits: Node) -> Node:
        rest = list(limits)
        if lo is not None:
            v = Op("maximum", (v, rest.pop(0)), v.dtype)
        if hi is not None:
            v = Op("minimum", (v, rest.pop(0)), v.dtype)
        return v

    return elementwise(ctx, node, operands, fn)


@lowers(aten._to_copy, prims.convert_element_type, aten.clone, aten.alias, aten.lift_fresh_copy,
        aten.detach, aten.contiguous, prims.view_of, aten._conj, aten.resolve_conj, aten.resolve_neg, aten.positive)
def _copy_or_cast(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, *args: Any, **kwargs: Any) -> TensorValue:
    """Values are immutable here, so copies are free; a dtype change is a cast."""
    out = ctx.dtype_of(node)
    if out == x.dtype:
        return x
    return TensorValue(out, x.shape, lambda idx: cast(x.loader(idx), out), None)


@lowers(aten.copy.default)
def _copy(ctx: GraphLowering, node: torch.fx.Node, dst: TensorValue, src: TensorValue, *args: Any) -> TensorValue:
    return elementwise(ctx, node, [src], lambda v: v)


@lowers(aten.full.default, aten.full_like.default, aten.scalar_tensor.default, aten.zeros.default,
        aten.ones.default, aten.zeros_like.default, aten.ones_like.default, aten.new_full.default,
        aten.new_zeros.default, aten.new_ones.default, prims.full.default)
def _full(ctx: GraphLowering, node: torch.fx.Node, *args: Any, **kwargs: Any) -> TensorValue:
    name = node.target.overloadpacket.__name__
    if name in ("zeros", "zeros_like", "new_zeros"):
        value: Any = 0
    elif name in ("ones", "ones_like", "new_ones"):
        value = 1
    elif name == "scalar_tensor":
        value = args[0]
    elif name in ("full_like", "new_full"):
        value = args[1]
    else:  # full(size, value)
        value = args[1]
    out = ctx.dtype_of(node)
    const = scalar_node(value, out)
    return TensorValue(out, ctx.shape_of(node), lambda idx: const)


@lowers(aten.empty.memory_format, aten.empty_like.default, aten.empty_permuted.default,
        aten.empty_strided.default, aten.new_empty.default, aten.new_empty_strided.default)
def _empty(ctx: GraphLowering, node: torch.fx.Node, *args: Any, **kwargs: Any) -> TensorValue:
    """Uninitialised memory may hold anything: zeros, which cost nothing when a copy overwrites them."""
    out = ctx.dtype_of(node)
    const = scalar_node(0, out)
    return TensorValue(out, ctx.shape_of(node), lambda idx: const)


@lowers(aten.arange.start_step, aten.arange.default, aten.arange.start, prims.iota.default)
def _arange(ctx: GraphLowering, node: torch.fx.Node, *args: Any, **kwargs: Any) -> TensorValue:
    name = node.target.overloadpacket.__name__
    if name == "iota":
        start, step = kwargs.get("start", 0), kwargs.get("step", 1)
    elif len(args) == 1:
        start, step = 0, 1
    else:
        start, step = args[0], (args[2] if len(args) > 2 else kwargs.get("step", 1))
    out = ctx.dtype_of(node)
    start_n, step_n = scalar_node(start, _arange_dtype(start, step, out)), scalar_node(step, _arange_dtype(start, step, out))

    def load(idx: tuple) -> Node:
        i = cast(IndexValue(idx[0], "int64"), start_n.dtype)
        return cast(Op("add", (start_n, Op("mul", (i, step_n), start_n.dtype)), start_n.dtype), out)

    return TensorValue(out, ctx.shape_of(node), load)


def _arange_dtype(start: Any, step: Any, out: str) -> str:
    if is_float(out) or any(isinstance(v, float) for v in (start, step)):
        return "float64"
    return "int64"


@lowers(aten.nan_to_num.default)
def _nan_to_num(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, nan: Any = None, posinf: Any = None,
                neginf: Any = None) -> TensorValue:
    out = ctx.dtype_of(node)
    if not is_float(out):
        return x
    info = torch.finfo(getattr(torch, out))
    nan_v, pos_v, neg_v = nan if nan is not None else 0.0, posinf if posinf is not None else info.max, \
        neginf if neginf is not None else info.min

    def fn(v: Node) -> Node:
        v = Op("where", (Op("isnan", (v,), "bool"), Const(float(nan_v), v.dtype), v), v.dtype)
        v = Op("where", (Op("isposinf", (v,), "bool"), Const(float(pos_v), v.dtype), v), v.dtype)
        return Op("where", (Op("isneginf", (v,), "bool"), Const(float(neg_v), v.dtype), v), v.dtype)

    return elementwise(ctx, node, [x], fn)


@lowers(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(ctx: GraphLowering, node: torch.fx.Node, a: TensorValue, b: Operand, w: Operand) -> TensorValue:
    def fn(x: Node, y: Node, t: Node) -> Node:
        return Op("add", (x, Op("mul", (t, Op("sub", (y, x), x.dtype)), x.dtype)), x.dtype)

    return elementwise(ctx, node, [a, b, w], fn)


@lowers(aten.logit.default)
def _logit(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, eps: Any = None) -> TensorValue:
    def fn(v: Node) -> Node:
        if eps is not None:
            v = Op("minimum", (Op("maximum", (v, Const(float(eps), v.dtype)), v.dtype), Const(1.0 - eps, v.dtype)), v.dtype)
        return Op("log", (Op("div", (v, Op("sub", (Const(1.0, v.dtype), v), v.dtype)), v.dtype),), v.dtype)

    return elementwise(ctx, node, [x], fn)



@lowers(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_eval(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, weight: Any, bias: Any,
                     mean: TensorValue, var: TensorValue, momentum: float, eps: float) -> tuple:
    """Inference batch norm over dim 1: (x - mean) / sqrt(var + eps) * weight + bias, all elementwise."""
    shape = x.shape
    channel_shape = [shape[1]] + [1] * (x.rank - 2)
    from ..values import reshape

    stats = [mean, var] + [t for t in (weight, bias) if t is not None]
    per_channel = [broadcast_to(reshape(t, channel_shape), shape) for t in stats]
    out = x.dtype

    def load(idx: tuple) -> Node:
        v = cast(x.loader(idx), out)
        m, s = (cast(t.loader(idx), out) for t in per_channel[:2])
        rest = [cast(t.loader(idx), out) for t in per_channel[2:]]
        inv = Op("rsqrt", (Op("add", (s, Const(float(eps), out)), out),), out)
        y = Op("mul", (Op("sub", (v, m), out), inv), out)
        if weight is not None:
            y = Op("mul", (y, rest.pop(0)), out)
        if bias is not None:
            y = Op("add", (y, rest.pop(0)), out)
        return y

    # Eval mode saves no statistics: eager's other two outputs are empty.
    empty = [TensorValue(out, tuple(ctx.sym(s) for s in t.shape), lambda idx: Const(0.0, out)) for t in node.meta["val"][1:]]
    return (TensorValue(out, shape, load), *empty)


@lowers(aten.native_dropout.default)
def _dropout(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue, p: float, train: bool | None) -> tuple:
    """Only the cases that draw no random numbers: no dropout (eval mode, p = 0) and p = 1, which zeroes
    everything (x * 0, as eager computes it, so NaN and inf stay NaN)."""
    if train and 0 < p < 1:
        raise UnsupportedError(f"dropout with p={p} in training mode draws random numbers; an exported model "
                               "runs in eval mode: call model.eval() before export")
    drop = bool(train) and p >= 1
    mask = TensorValue("bool", x.shape, lambda idx: Const(not drop, "bool"))
    if not drop:
        return (x, mask)
    return (TensorValue(x.dtype, x.shape, lambda idx: Op("mul", (x.loader(idx), cast(Const(0, "int64"), x.dtype)), x.dtype)),
            mask)
