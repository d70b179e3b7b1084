"""Integer size expressions over the user's symbols: creation, bounds, and printing to JSON and C++.

Sizes, strides and offsets are sympy expressions, as in torch.export itself, so that the shapes torch
derives (conv output sizes, reshapes) arrive here without translation. They leave the compiler in two
forms: JSON for the runtime's evaluator (docs/package-format.md) and C++ for the generated kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy
from torch.utils._sympy import functions as tf
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from ...errors import UnsupportedError

Expr = sympy.Expr


def size_symbol(name: str) -> sympy.Symbol:
    """The symbol of a user's dynamic dimension (`seq`, `batch`)."""
    return sympy.Symbol(name, integer=True, positive=True)


def index_var(prefix: str, i: int) -> sympy.Symbol:
    """A loop index of a generated kernel: i0, i1, ... for output dims, r0, r1, ... for reduced ones."""
    return sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True)


def as_expr(value: object) -> Expr:
    """An int, SymInt or sympy expression as a sympy expression."""
    if isinstance(value, sympy.Expr):
        return value
    node = getattr(value, "node", None)
    if node is not None and hasattr(node, "expr"):
        return node.expr
    if isinstance(value, int):
        return sympy.Integer(value)
    raise UnsupportedError(f"a size of type {type(value).__name__} ({value!r}) is not an integer expression")


def product(values: Sequence[Expr]) -> Expr:
    out: Expr = sympy.Integer(1)
    for v in values:
        out = out * v
    return out


def contiguous_strides(shape: Sequence[Expr]) -> tuple[Expr, ...]:
    strides: list[Expr] = []
    running: Expr = sympy.Integer(1)
    for size in reversed(shape):
        strides.append(running)
        running = running * size
    return tuple(reversed(strides))


def upper_bound(expr: Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> int:
    """The largest value `expr` takes over the symbols' declared ranges (used to plan memory)."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    bound = bound_sympy(expr, {s: ValueRanges(lo, hi) for s, (lo, hi) in ranges.items()})
    if not bound.upper.is_Integer:
        raise UnsupportedError(f"cannot bound the size {expr} over the declared ranges")
    return int(bound.upper)


def evaluate(expr: Expr, values: Mapping[sympy.Symbol, int]) -> int:
    result = sympy.sympify(expr).xreplace({s: sympy.Integer(v) for s, v in values.items()})
    if not result.is_Integer:
        raise UnsupportedError(f"the size {expr} does not evaluate to an integer at {dict(values)}")
    return int(result)


# --- printing -----------------------------------------------------------------------------------------


def _split_ceil_div(expr: Expr) -> tuple[Expr, Expr]:
    return expr.args[0], expr.args[1]


def to_json(expr: Expr) -> object:
    """The runtime's form: int, symbol name, or [op, args...] with op in + * // % max min."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return expr.name
    if isinstance(expr, sympy.Add):
        return ["+", *[to_json(a) for a in expr.args]]
    if isinstance(expr, sympy.Mul):
        return ["*", *[to_json(a) for a in expr.args]]
    if isinstance(expr, tf.FloorDiv):
        return ["//", to_json(expr.args[0]), to_json(expr.args[1])]
    if isinstance(expr, tf.CeilDiv):
        a, b = _split_ceil_div(expr)
        return ["*", -1, ["//", ["*", -1, to_json(a)], to_json(b)]]
    if isinstance(expr, tf.ModularIndexing):
        x, div, mod = expr.args
        return ["%", ["//", to_json(x), to_json(div)], to_json(mod)]
    if isinstance(expr, (tf.PythonMod, tf.Mod, sympy.Mod)):
        return ["%", to_json(expr.args[0]), to_json(expr.args[1])]
    if isinstance(expr, (sympy.Max, tf.Max)):
        return ["max", *[to_json(a) for a in expr.args]]
    if isinstance(expr, (sympy.Min, tf.Min)):
        return ["min", *[to_json(a) for a in expr.args]]
    if isinstance(expr, (sympy.Pow, tf.PowByNatural)) and expr.args[1].is_Integer and int(expr.args[1]) >= 0:
        return ["*", 1, *[to_json(expr.args[0])] * int(expr.args[1])]
    raise UnsupportedError(f"the size expression {expr} uses {type(expr).__name__}, which aotpack cannot evaluate")


def to_cpp(expr: Expr, names: Mapping[sympy.Symbol, str] | None = None) -> str:
    """A C++ int64_t expression. `names` renames symbols (user symbols become their kernel-local names)."""
    expr = sympy.sympify(expr)
    names = names or {}

    def p(e: Expr) -> str:
        if e.is_Integer:
            v = int(e)
            return f"INT64_C({v})" if abs(v) > 2**31 - 1 else (f"({v})" if v < 0 else str(v))
        if e.is_Symbol:
            return names.get(e, e.name)
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(p(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + " * ".join(p(a) for a in e.args) + ")"
        if isinstance(e, tf.FloorDiv):
            return f"aotpack_floordiv({p(e.args[0])}, {p(e.args[1])})"
        if isinstance(e, tf.CeilDiv):
            a, b = _split_ceil_div(e)
            return f"(-aotpack_floordiv(-({p(a)}), {p(b)}))"
        if isinstance(e, tf.ModularIndexing):
            x, div, mod = e.args
            return f"aotpack_mod(aotpack_floordiv({p(x)}, {p(div)}), {p(mod)})"
        if isinstance(e, (tf.PythonMod, tf.Mod, sympy.Mod)):
            return f"aotpack_mod({p(e.args[0])}, {p(e.args[1])})"
        if isinstance(e, (sympy.Max, tf.Max, sympy.Min, tf.Min)):
            fn = "std::max" if isinstance(e, (sympy.Max, tf.Max)) else "std::min"
            out = p(e.args[0])
            for a in e.args[1:]:
                out = f"{fn}<int64_t>({out}, {p(a)})"
            return out
        if isinstance(e, (sympy.Pow, tf.PowByNatural)) and e.args[1].is_Integer and int(e.args[1]) >= 0:
            return "(" + " * ".join([p(e.args[0])] * int(e.args[1])) + ")" if int(e.args[1]) else "1"
        raise UnsupportedError(f"the index expression {e} uses {type(e).__name__}, which aotpack cannot print")

    return p(expr)
