"""How the CUDA backend writes kernels: Triton spellings of the dtypes, size expressions and scalar ops.

Half types are loaded, computed in float32 and rounded on store, as the C++ kernels do. A data-dependent
check (an index read from data out of range, an integer division by zero) is recorded in the writer's
`checks`; the kernel sets its error flag where one holds, and reads a harmless value instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy

from ....errors import UnsupportedError
from ...codegen.body import BodySpelling, BodyWriter, Check, chebyshev_series
from ...codegen.printer import IndexSpelling, fold_calls, print_expr
from ...ir.dtypes import DTYPES, compute_dtype, is_float
from ...ir.scalar import Const, Indirect, Load, Op

# Triton's pointer element type per storage dtype (kernel signatures); bool is stored as one byte.
POINTER_TYPE = {
    "float32": "*fp32", "float64": "*fp64", "float16": "*fp16", "bfloat16": "*bf16", "int64": "*i64",
    "int32": "*i32", "int16": "*i16", "int8": "*i8", "uint8": "*u8", "bool": "*i8",
}
# Triton's type per dtype, and the one a value of each dtype is computed in inside a kernel.
TL_TYPE = {
    "float32": "tl.float32", "float64": "tl.float64", "float16": "tl.float16", "bfloat16": "tl.bfloat16",
    "int64": "tl.int64", "int32": "tl.int32", "int16": "tl.int16", "int8": "tl.int8", "uint8": "tl.uint8",
    "bool": "tl.int1",
}
assert POINTER_TYPE.keys() == TL_TYPE.keys() == DTYPES.keys()
COMPUTE_TL = {dtype: TL_TYPE[compute_dtype(dtype)] for dtype in DTYPES}


def _nonneg(e: sympy.Expr) -> bool:
    return bool(sympy.sympify(e).is_nonnegative)


class TritonIndex(IndexSpelling):
    """int64 Triton expressions. Triton's // and % truncate like C, so Python's floor semantics go through
    the prelude's helpers unless the operands are provably non-negative."""

    what = "print for Triton"

    def floordiv(self, e: sympy.Expr, a: str, b: str) -> str:
        return f"({a} // {b})" if _nonneg(e.args[0]) and _nonneg(e.args[1]) else f"_floordiv({a}, {b})"

    def ceildiv(self, e: sympy.Expr, a: str, b: str) -> str:
        return f"(-_floordiv(-({a}), {b}))"

    def modular_indexing(self, e: sympy.Expr, x: str, div: str, mod: str) -> str:
        if _nonneg(e.args[0]):
            return f"(({x} // {div}) % {mod})"
        return f"_pymod(_floordiv({x}, {div}), {mod})"

    def mod(self, e: sympy.Expr, a: str, b: str) -> str:
        return f"({a} % {b})" if _nonneg(e.args[0]) and _nonneg(e.args[1]) else f"_pymod({a}, {b})"

    def max(self, args: list[str]) -> str:
        return fold_calls("tl.maximum", args)

    def min(self, args: list[str]) -> str:
        return fold_calls("tl.minimum", args)


TRITON_INDEX = TritonIndex()


def to_triton(expr: sympy.Expr, names: dict[sympy.Symbol, str] | None = None) -> str:
    """An int64 Triton expression; `names` renames symbols."""
    return print_expr(expr, TRITON_INDEX, names)


_UNARY_FLOAT = {
    "exp": "libdevice.exp", "exp2": "libdevice.exp2", "expm1": "libdevice.expm1", "log": "libdevice.log",
    "log2": "libdevice.log2", "log10": "libdevice.log10", "log1p": "libdevice.log1p", "sqrt": "tl.sqrt_rn",
    "sin": "libdevice.sin", "cos": "libdevice.cos", "tan": "libdevice.tan", "asin": "libdevice.asin",
    "acos": "libdevice.acos", "atan": "libdevice.atan", "sinh": "libdevice.sinh", "cosh": "libdevice.cosh",
    "tanh": "libdevice.tanh", "asinh": "libdevice.asinh", "acosh": "libdevice.acosh", "atanh": "libdevice.atanh",
    "erf": "libdevice.erf", "erfc": "libdevice.erfc", "floor": "libdevice.floor", "ceil": "libdevice.ceil",
    "round": "libdevice.rint", "trunc": "libdevice.trunc", "abs": "tl.abs",
}
_BINARY_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
    "ge": ">=", "logical_and": "&", "logical_or": "|", "logical_xor": "!=", "lshift": "<<", "rshift": ">>",
    "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
}
_BINARY_FLOAT_FN = {"atan2": "libdevice.atan2", "hypot": "libdevice.hypot", "copysign": "libdevice.copysign",
                    "fmax": "libdevice.fmax", "fmin": "libdevice.fmin", "pow": "libdevice.pow",
                    "fmod": "libdevice.fmod"}


def const_literal(value: Any, dtype: str) -> str:
    """A typed 0-d constant (Triton's literals would otherwise take Triton's default types)."""
    tl_type = COMPUTE_TL[dtype]
    if dtype == "bool":
        return f"tl.full([], {1 if value else 0}, tl.int1)"
    if is_float(dtype):
        value = float(value)
        if math.isnan(value):
            text = "_NAN"
        elif math.isinf(value):
            text = "_NINF" if value < 0 else "_INF"
        else:
            text = repr(value)
        return f"tl.full([], {text}, {tl_type})"
    return f"tl.full([], {int(value)}, {tl_type})"


class TritonBody(BodySpelling):
    """Triton statements (`name = expr`). Every load is guarded by the active-lane `mask`, its pointer made a
    block of the mask's shape by adding `zero` (a block of zeros); `guard`, where given, picks both per load
    instead (a narrower mask for a load that varies along fewer axes)."""

    index = TRITON_INDEX
    types = COMPUTE_TL

    def __init__(self, mask: str, zero: str = "xzero", guard: Callable[[Load], tuple[str, str]] | None = None) -> None:
        self.mask = mask
        self.zero = zero
        self.guard = guard

    def assign(self, name: str, type_name: str, expr: str) -> str:
        return f"{name} = {expr}"

    def const(self, value: object, dtype: str) -> str:
        return const_literal(value, dtype)

    def index_value(self, index: str, dtype: str) -> str:
        return f"({index} + tl.zeros([], tl.int64)).to({COMPUTE_TL[dtype]})"

    def load(self, writer: BodyWriter, node: Load, pointer: str, offset: str) -> str:
        # `zero` makes every pointer a block of the mask's shape, whatever loop indices the position uses:
        # tl.load refuses a block mask on a scalar or narrower pointer.
        mask, zero = self.guard(node) if self.guard else (self.mask, self.zero)
        loaded = f"tl.load({pointer} + {offset} + {zero}, mask={mask}, other=0)"
        if node.dtype == "bool":
            return f"{loaded} != 0"
        if node.dtype in ("float16", "bfloat16"):
            return f"{loaded}.to(tl.float32)"
        return loaded

    def checked_position(self, writer: BodyWriter, ind: Indirect, position: str) -> str:
        pos = writer.temp(f"{position}.to(tl.int64)")
        size = writer.index(ind.size)
        if ind.wrap:
            pos = writer.temp(f"tl.where({pos} < 0, {pos} + {size}, {pos})")
        bad = writer.temp(f"({pos} < 0) | ({pos} >= {size})")
        writer.checks.append(Check(bad, ind.what))
        return writer.temp(f"tl.where({bad}, 0, {pos})")

    def op(self, writer: BodyWriter, node: Op, args: list[str]) -> str:
        name, dtype = node.name, node.dtype
        tl_type = COMPUTE_TL[dtype]
        arg_dtype = node.args[0].dtype if node.args else dtype
        floating = is_float(arg_dtype)
        is_bool = arg_dtype == "bool"
        if name == "cast":
            if dtype == "bool":
                return f"{args[0]} != 0"
            if COMPUTE_TL[dtype] != TL_TYPE[dtype] and arg_dtype != dtype:
                # Half types compute in float32, but a cast must still round to the narrow type, as eager does.
                return f"{args[0]}.to({TL_TYPE[dtype]}).to({tl_type})"
            return f"{args[0]}.to({tl_type})"
        if name == "where":
            return f"tl.where({args[0]}, {args[1]}, {args[2]})"
        if name == "bitcast":
            return f"{args[0]}.to({tl_type}, bitcast=True)"
        if name == "chebyshev":
            return chebyshev_series(writer, node, args)
        if name == "precise_erf":  # libdevice's (2 ulp), not the prelude's 5-ulp _erf_f32: see ops/special.py
            return f"libdevice.erf({args[0]})"
        if name == "neg":
            return f"-{args[0]}"
        if name in ("logical_not", "bitwise_not"):
            if name == "logical_not" or is_bool:
                return f"{args[0]} == 0"
            return f"~{args[0]}"
        if name in _BINARY_INFIX:
            if name == "div" and not floating:
                raise UnsupportedError("integer true division reached code generation; this is an aotpack bug")
            return f"{args[0]} {_BINARY_INFIX[name]} {args[1]}"
        if name in ("maximum", "minimum"):
            if floating:
                return f"_{name}_nan({args[0]}, {args[1]})"
            return f"tl.{name}({args[0]}, {args[1]})"
        if name == "relu":
            return f"tl.where({args[0]} < 0, tl.zeros_like({args[0]}), {args[0]})"
        if name == "sigmoid":
            if tl_type == "tl.float32":
                return f"_sigmoid_f32({args[0]})"  # the prelude's: fewer instructions than libdevice's exp
            return f"1.0 / (1.0 + libdevice.exp(-{args[0]}))"
        if name in ("sqrt", "rsqrt"):  # tl.sqrt_rn takes float32 only; libdevice's float64 sqrt is IEEE's too
            root = f"{'tl.sqrt_rn' if tl_type == 'tl.float32' else 'libdevice.sqrt'}({args[0]})"
            return root if name == "sqrt" else f"1.0 / {root}"
        if name == "reciprocal":
            return f"1.0 / {args[0]}"
        if name == "sign":
            return f"_sign({args[0]})"
        if name in ("isposinf", "isneginf"):
            return f"{args[0]} == {'_INF' if name == 'isposinf' else '_NINF'}"
        if not floating:
            if name in ("floor", "ceil", "round", "trunc"):
                return f"{args[0]} + 0"
            if name == "abs":
                return f"tl.where({args[0]} < 0, -{args[0]}, {args[0]})"
            if name in ("floordiv", "truncdiv", "remainder", "fmod"):
                divisor = args[1]
                if not (isinstance(node.args[1], Const) and node.args[1].value != 0):  # a constant needs no check
                    zero = writer.temp(f"{args[1]} == 0")
                    writer.checks.append(Check(zero, "integer division by zero" if "div" in name else "integer modulo by zero"))
                    divisor = writer.temp(f"tl.where({zero}, 1, {args[1]})")
                fn = {"floordiv": "_floordiv({a}, {b})", "truncdiv": "{a} // {b}", "remainder": "_pymod({a}, {b})",
                      "fmod": "{a} % {b}"}[name]
                return f"({fn.format(a=args[0], b=divisor)}).to({tl_type})"
            if name in ("isnan", "isinf", "signbit", "isfinite"):
                if name == "signbit":
                    return f"{args[0]} < 0"
                return f"tl.full([], {1 if name == 'isfinite' else 0}, tl.int1)"
            raise UnsupportedError(f"the scalar op {name} on {arg_dtype} has no Triton form yet")
        if name == "isnan":
            return f"{args[0]} != {args[0]}"
        if name == "isinf":
            return f"tl.abs({args[0]}) == _INF"
        if name == "isfinite":
            return f"tl.abs({args[0]}) < _INF"
        if name == "signbit":
            return f"libdevice.signbit({args[0]}) != 0"
        if name == "erf" and tl_type == "tl.float32":
            return f"_erf_f32({args[0]})"  # the prelude's: fewer instructions and registers than libdevice's
        if name in _UNARY_FLOAT:
            return f"{_UNARY_FLOAT[name]}({args[0]})"
        if name in _BINARY_FLOAT_FN:
            return f"{_BINARY_FLOAT_FN[name]}({args[0]}, {args[1]})"
        if name == "remainder":
            return f"_fmod_py({args[0]}, {args[1]})"
        if name == "floordiv":
            return f"libdevice.floor({args[0]} / {args[1]})"
        raise UnsupportedError(f"the scalar op {name} on {arg_dtype} has no Triton form yet")


def body_writer(arg_names: dict[str, str], symbol_names: dict[sympy.Symbol, str], mask: str, prefix: str = "t",
                zero: str = "xzero", guard: Callable[[Load], tuple[str, str]] | None = None) -> BodyWriter:
    return BodyWriter(TritonBody(mask, zero, guard), arg_names, symbol_names, prefix=prefix)
