"""How the CPU backend writes kernels: C++17 spellings of the dtypes, size expressions and scalar ops.

Half types are stored as uint16_t and computed in float (the prelude's aotpack_*_to_* convert them).
"""

from __future__ import annotations

import math
from typing import Any

import sympy

from ....errors import UnsupportedError
from ...codegen.body import BodySpelling, BodyWriter, chebyshev_series
from ...codegen.counters import CountedExpr, Digit
from ...codegen.printer import IndexSpelling, fold_calls, print_expr
from ...ir.dtypes import DTYPES, compute_dtype, is_float
from ...ir.scalar import Indirect, Load, Op

# The C++ type each dtype is stored as.
STORAGE_CTYPE = {
    "float32": "float", "float64": "double", "float16": "uint16_t", "bfloat16": "uint16_t", "int64": "int64_t",
    "int32": "int32_t", "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "bool",
}
assert STORAGE_CTYPE.keys() == DTYPES.keys()
# The C++ type a value of each dtype is computed in.
COMPUTE_CTYPE = {dtype: STORAGE_CTYPE[compute_dtype(dtype)] for dtype in DTYPES}


def load_from_storage(expr: str, dtype: str) -> str:
    if dtype == "bfloat16":
        return f"aotpack_bf16_to_f32({expr})"
    if dtype == "float16":
        return f"aotpack_f16_to_f32({expr})"
    return expr


def widen_to_float(dtype: str) -> str:
    """The function (a name to call) that turns one stored element of `dtype` into a float."""
    return {"bfloat16": "aotpack_bf16_to_f32", "float16": "aotpack_f16_to_f32"}.get(dtype, "static_cast<float>")


def store_to_storage(expr: str, dtype: str) -> str:
    if dtype == "bfloat16":
        return f"aotpack_f32_to_bf16({expr})"
    if dtype == "float16":
        return f"aotpack_f32_to_f16({expr})"
    return f"static_cast<{STORAGE_CTYPE[dtype]}>({expr})"


def const_literal(value: Any, dtype: str) -> str:
    ctype = COMPUTE_CTYPE[dtype]
    if dtype == "bool":
        return "true" if value else "false"
    if is_float(dtype):
        value = float(value)
        if math.isnan(value):
            return f"static_cast<{ctype}>(NAN)"
        if math.isinf(value):
            return f"static_cast<{ctype}>({'-' if value < 0 else ''}INFINITY)"
        return f"static_cast<{ctype}>({value!r})"
    return f"static_cast<{ctype}>(INT64_C({int(value)}))"


class CppIndex(IndexSpelling):
    """int64_t size expressions; Python's floor division and modulo through the prelude's helpers."""

    def integer(self, v: int) -> str:
        return f"INT64_C({v})" if abs(v) > 2**31 - 1 else super().integer(v)

    def floordiv(self, e: sympy.Expr, a: str, b: str) -> str:
        return f"aotpack_floordiv({a}, {b})"

    def ceildiv(self, e: sympy.Expr, a: str, b: str) -> str:
        return f"(-aotpack_floordiv(-({a}), {b}))"

    def modular_indexing(self, e: sympy.Expr, x: str, div: str, mod: str) -> str:
        return f"aotpack_mod(aotpack_floordiv({x}, {div}), {mod})"

    def mod(self, e: sympy.Expr, a: str, b: str) -> str:
        return f"aotpack_mod({a}, {b})"

    def max(self, args: list[str]) -> str:
        return fold_calls("std::max<int64_t>", args)

    def min(self, args: list[str]) -> str:
        return fold_calls("std::min<int64_t>", args)


CPP_INDEX = CppIndex()


def to_cpp(expr: sympy.Expr, names: dict[sympy.Symbol, str] | None = None) -> str:
    """A C++ int64_t expression; `names` renames symbols (user symbols become their kernel-local names)."""
    return print_expr(expr, CPP_INDEX, names)


def counted_loop(counted: CountedExpr, names: dict[sympy.Symbol, str], index: str, count: str, var: str,
                 start: str, store: str) -> list[str]:
    """C++ lines of `for (index = 0; index < count; ++index)` with `var` = start + index, running `store` (a
    statement with `$value` for the counted expression). Each digit's division is done once before the loop
    and counted in it (codegen/counters.py) when every divisor is at least 1; otherwise (a size no real model
    gives) the loop divides in every step, as it would without counters."""
    direct = [f"for (int64_t {index} = 0; {index} < {count}; ++{index}) {{",
              f"  const int64_t {var} = {start} + {index};",
              "  " + store.replace("$value", to_cpp(counted.original, names)), "}"]
    if not counted.digits:
        return direct
    scope = {**names, **{s: s.name for d in counted.digits for s in (d.quotient, d.remainder)}}

    def divisor(d: Digit) -> str:
        return f"{d.remainder.name}_d"

    checks = [f"{divisor(d)} >= 1" for d in counted.digits if not d.divisor.is_number]  # numbers are >= 1 here
    lines = [f"const int64_t {divisor(d)} = {to_cpp(d.divisor, scope)};" for d in counted.digits]
    lines += [f"if ({' && '.join(checks) or 'true'}) {{", f"  int64_t {var} = {start};"]
    for d in counted.digits:  # parents first: a child's argument reads its parent's quotient
        argument = to_cpp(d.argument, scope)
        lines.append(f"  int64_t {d.quotient.name} = aotpack_floordiv({argument}, {divisor(d)});")
        lines.append(f"  int64_t {d.remainder.name} = aotpack_mod({argument}, {divisor(d)});")

    def steps(parent: int | None, indent: str) -> list[str]:
        out = []
        for i in counted.children(parent):
            d = counted.digits[i]
            out += [f"{indent}if (++{d.remainder.name} == {divisor(d)}) {{", f"{indent}  {d.remainder.name} = 0;",
                    f"{indent}  ++{d.quotient.name};", *steps(i, indent + "  "), f"{indent}}}"]
        return out

    lines += [f"  for (int64_t {index} = 0; {index} < {count}; ++{index}, ++{var}) {{",
              "    " + store.replace("$value", to_cpp(counted.expr, scope)), *steps(None, "    "), "  }",
              "} else {", *("  " + line for line in direct), "}"]
    return lines


_UNARY_FLOAT = {
    "exp": "std::exp", "exp2": "std::exp2", "expm1": "std::expm1", "log": "std::log", "log2": "std::log2",
    "log10": "std::log10", "log1p": "std::log1p", "sqrt": "std::sqrt", "sin": "std::sin", "cos": "std::cos",
    "tan": "std::tan", "asin": "std::asin", "acos": "std::acos", "atan": "std::atan", "sinh": "std::sinh",
    "cosh": "std::cosh", "tanh": "std::tanh", "asinh": "std::asinh", "acosh": "std::acosh", "atanh": "std::atanh",
    "erf": "std::erf", "erfc": "std::erfc", "lgamma": "std::lgamma", "floor": "std::floor", "ceil": "std::ceil", "round": "std::nearbyint",
    "trunc": "std::trunc", "abs": "std::abs", "isnan": "std::isnan", "isinf": "std::isinf",
    "isfinite": "std::isfinite", "signbit": "std::signbit",
}
# float versions the compiler can vectorise (templates/cpp/prelude.h.jinja); double keeps libm's.
_VECTOR_FLOAT = {"exp": "aotpack_exp", "tanh": "aotpack_tanh", "erf": "aotpack_erf"}
_BINARY_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
    "ge": ">=", "logical_and": "&&", "logical_or": "||", "logical_xor": "!=", "lshift": "<<", "rshift": ">>",
}
_BINARY_FLOAT_FN = {"atan2": "std::atan2", "hypot": "std::hypot", "copysign": "std::copysign",
                    "fmax": "std::fmax", "fmin": "std::fmin", "pow": "std::pow", "fmod": "std::fmod"}


class CppBody(BodySpelling):
    """C++ statements: `const T name = expr;`; a bad index read from data goes to the kernel ABI's
    aotpack_check_index, which reports it and yields 0."""

    index = CPP_INDEX
    types = COMPUTE_CTYPE

    def assign(self, name: str, type_name: str, expr: str) -> str:
        return f"const {type_name} {name} = {expr};"

    def const(self, value: object, dtype: str) -> str:
        return const_literal(value, dtype)

    def index_value(self, index: str, dtype: str) -> str:
        return f"static_cast<{COMPUTE_CTYPE[dtype]}>({index})"

    def load(self, writer: BodyWriter, node: Load, pointer: str, offset: str) -> str:
        return load_from_storage(f"{pointer}[{offset}]", node.dtype)

    def checked_position(self, writer: BodyWriter, ind: Indirect, position: str) -> str:
        what = ind.what.replace("\\", "\\\\").replace('"', '\\"')
        return writer.temp(f'aotpack_check_index(ctx, static_cast<int64_t>({position}), '
                           f'{writer.index(ind.size)}, {"true" if ind.wrap else "false"}, "{what}")', "int64_t")

    def op(self, writer: BodyWriter, node: Op, args: list[str]) -> str:
        name, dtype = node.name, node.dtype
        ctype = COMPUTE_CTYPE[dtype]
        arg_dtype = node.args[0].dtype if node.args else dtype
        is_float_arg = is_float(arg_dtype)
        is_bool = arg_dtype == "bool"
        if name == "cast":
            if dtype == "bool":
                return f"({args[0]} != 0)"
            if dtype in ("bfloat16", "float16") and arg_dtype != dtype:
                # half types compute in float, but a cast to one must still round, fused or not
                half = "bf16" if dtype == "bfloat16" else "f16"
                return f"aotpack_{half}_to_f32(aotpack_f32_to_{half}(static_cast<float>({args[0]})))"
            return f"static_cast<{ctype}>({args[0]})"
        if name == "where":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if name == "bitcast":
            return f"aotpack_bitcast<{ctype}>({args[0]})"
        if name == "chebyshev":
            return chebyshev_series(writer, node, args)
        if name == "precise_erf":  # libm's, not the prelude's few-ulp aotpack_erf: see ops/special.py
            return f"std::erf({args[0]})"
        if name == "neg":
            return f"static_cast<{ctype}>(-{args[0]})"
        if name in ("logical_not", "bitwise_not"):
            return f"(!{args[0]})" if (name == "logical_not" or is_bool) else f"static_cast<{ctype}>(~{args[0]})"
        if name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            op = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[name]
            return f"static_cast<{ctype}>({args[0]} {op} {args[1]})"
        if name in _BINARY_INFIX:
            if name == "div" and not is_float_arg:
                raise UnsupportedError("integer true division reached code generation; this is an aotpack bug")
            return f"static_cast<{ctype}>({args[0]} {_BINARY_INFIX[name]} {args[1]})"
        if name in ("maximum", "minimum"):
            fn = "aotpack_maximum" if name == "maximum" else "aotpack_minimum"
            return f"{fn}<{ctype}>({args[0]}, {args[1]})"
        if name == "relu":
            return f"({args[0]} < 0 ? static_cast<{ctype}>(0) : {args[0]})"
        if name == "sigmoid":
            exp = "aotpack_exp" if ctype == "float" else "std::exp"
            return f"static_cast<{ctype}>(1) / (static_cast<{ctype}>(1) + {exp}(-{args[0]}))"
        if name == "rsqrt":
            return f"static_cast<{ctype}>(1) / std::sqrt({args[0]})"
        if name == "reciprocal":
            return f"static_cast<{ctype}>(1) / {args[0]}"
        if name == "sign":
            return f"aotpack_sign<{ctype}>({args[0]})"
        if name in ("isposinf", "isneginf"):
            return f"({args[0]} == {'' if name == 'isposinf' else '-'}INFINITY)"
        if not is_float_arg:
            if name in ("floor", "ceil", "round", "trunc"):
                return args[0]
            if name == "abs":
                return f"static_cast<{ctype}>({args[0]} < 0 ? -{args[0]} : {args[0]})"
            integer = {"floordiv": "aotpack_idiv_floor", "truncdiv": "aotpack_idiv_trunc", "remainder": "aotpack_imod",
                       "fmod": "aotpack_ifmod"}
            if name in integer:
                return f"{integer[name]}<{ctype}>(ctx, {args[0]}, {args[1]})"
            if name == "pow":
                return f"aotpack_ipow<{ctype}>({args[0]}, {args[1]})"
            if name in ("isnan", "isinf", "signbit", "isfinite"):
                return {"isnan": "false", "isinf": "false", "isfinite": "true"}.get(name, f"({args[0]} < 0)")
        if ctype == "float" and name in _VECTOR_FLOAT:
            return f"{_VECTOR_FLOAT[name]}({args[0]})"
        if name in _UNARY_FLOAT:
            return f"{_UNARY_FLOAT[name]}({args[0]})"
        if name in _BINARY_FLOAT_FN:
            return f"{_BINARY_FLOAT_FN[name]}({args[0]}, {args[1]})"
        if name == "remainder":
            return f"aotpack_fmod_py<{ctype}>({args[0]}, {args[1]})"
        if name == "floordiv":
            return f"std::floor({args[0]} / {args[1]})"
        raise UnsupportedError(f"the scalar op {name} on {arg_dtype} has no C++ form yet")


CPP_BODY = CppBody()


def body_writer(arg_names: dict[str, str], symbol_names: dict[sympy.Symbol, str],
                inner: frozenset[sympy.Symbol] = frozenset()) -> BodyWriter:
    return BodyWriter(CPP_BODY, arg_names, symbol_names, inner)
