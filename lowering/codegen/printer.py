"""One printer for the integer size expressions (sympy) of the IR, in whatever language a spelling gives.

The walk over the expression is shared; what each node becomes is the spelling's: C++ for the CPU
kernels (backends/cpu/spelling.py), Triton for the CUDA kernels (backends/cuda/spelling.py), and the
runtime's JSON form for program.json (`JSON`, below; docs/package-format.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy
from torch.utils._sympy import functions as tf

from ...errors import UnsupportedError


class IndexSpelling:
    """How one language writes each kind of node; `e` is the sympy node, the other arguments its printed
    operands. The defaults are the infix forms C-like languages share."""

    # The error on a node no spelling covers: "the index expression ... which aotpack cannot print".
    noun = "index expression"
    what = "print"

    def integer(self, v: int) -> Any:
        return f"({v})" if v < 0 else str(v)

    def symbol(self, name: str) -> Any:
        return name

    def add(self, terms: list[Any]) -> Any:
        return "(" + " + ".join(terms) + ")"

    def mul(self, factors: list[Any]) -> Any:
        return "(" + " * ".join(factors) + ")"

    def power(self, base: Any, n: int) -> Any:
        return "(" + " * ".join([base] * n) + ")" if n else "1"

    def floordiv(self, e: sympy.Expr, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def ceildiv(self, e: sympy.Expr, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def modular_indexing(self, e: sympy.Expr, x: Any, div: Any, mod: Any) -> Any:
        """(x // div) % mod, Python's semantics."""
        raise NotImplementedError

    def mod(self, e: sympy.Expr, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def max(self, args: list[Any]) -> Any:
        raise NotImplementedError

    def min(self, args: list[Any]) -> Any:
        raise NotImplementedError


def fold_calls(fn: str, args: list[str]) -> str:
    """fn(fn(a, b), c) ...: an n-ary max or min through a binary function."""
    out = args[0]
    for a in args[1:]:
        out = f"{fn}({out}, {a})"
    return out


def print_expr(expr: sympy.Expr, spelling: IndexSpelling, names: Mapping[sympy.Symbol, str] | None = None) -> Any:
    """`expr` in `spelling`'s language; `names` renames symbols (user symbols become kernel-local names)."""
    names = names or {}

    def p(e: sympy.Expr) -> Any:
        if e.is_Integer:
            return spelling.integer(int(e))
        if e.is_Symbol:
            return spelling.symbol(names.get(e, e.name))
        if isinstance(e, sympy.Add):
            return spelling.add([p(a) for a in e.args])
        if isinstance(e, sympy.Mul):
            return spelling.mul([p(a) for a in e.args])
        if isinstance(e, tf.FloorDiv):
            return spelling.floordiv(e, p(e.args[0]), p(e.args[1]))
        if isinstance(e, tf.CeilDiv):
            return spelling.ceildiv(e, p(e.args[0]), p(e.args[1]))
        if isinstance(e, tf.ModularIndexing):
            return spelling.modular_indexing(e, *(p(a) for a in e.args))
        if isinstance(e, (tf.PythonMod, tf.Mod, sympy.Mod)):
            return spelling.mod(e, p(e.args[0]), p(e.args[1]))
        if isinstance(e, (sympy.Max, tf.Max)):
            return spelling.max([p(a) for a in e.args])
        if isinstance(e, (sympy.Min, tf.Min)):
            return spelling.min([p(a) for a in e.args])
        if isinstance(e, (sympy.Pow, tf.PowByNatural)) and e.args[1].is_Integer and int(e.args[1]) >= 0:
            return spelling.power(p(e.args[0]), int(e.args[1]))
        raise UnsupportedError(f"the {spelling.noun} {e} uses {type(e).__name__}, which aotpack cannot {spelling.what}")

    return p(sympy.sympify(expr))


class JsonSpelling(IndexSpelling):
    """The runtime's form: int, symbol name, or [op, args...] with op in + * // % max min."""

    what = "evaluate"
    noun = "size expression"

    def integer(self, v: int) -> Any:
        return v

    def add(self, terms: list[Any]) -> Any:
        return ["+", *terms]

    def mul(self, factors: list[Any]) -> Any:
        return ["*", *factors]

    def power(self, base: Any, n: int) -> Any:
        return ["*", 1, *[base] * n]

    def floordiv(self, e: sympy.Expr, a: Any, b: Any) -> Any:
        return ["//", a, b]

    def ceildiv(self, e: sympy.Expr, a: Any, b: Any) -> Any:
        return ["*", -1, ["//", ["*", -1, a], b]]

    def modular_indexing(self, e: sympy.Expr, x: Any, div: Any, mod: Any) -> Any:
        return ["%", ["//", x, div], mod]

    def mod(self, e: sympy.Expr, a: Any, b: Any) -> Any:
        return ["%", a, b]

    def max(self, args: list[Any]) -> Any:
        return ["max", *args]

    def min(self, args: list[Any]) -> Any:
        return ["min", *args]


JSON = JsonSpelling()


def to_json(expr: sympy.Expr) -> object:
    """A size expression in the runtime's JSON form (program.json, the manifest's signature)."""
    return print_expr(expr, JSON)
