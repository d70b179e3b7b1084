"""Divisions in a loop over consecutive values, kept as counters: one division each before the loop, none in it.

A loop whose variable x steps by one (a tile's columns, say) often computes x // d and x % d for divisors the
loop does not change (an image's width, a height times a width): a 64-bit division per iteration, which costs
more than a small matrix product's arithmetic per column (a convolution's 16 output channels by 27 taps).
Both are x's digits in a mixed radix, so each pair is counted instead: the remainder goes up by one and, on
reaching the divisor, returns to zero and carries one into the quotient; a division of that quotient (the
`(x // w) % h` of a flattened image) carries in turn. `count_divisions` finds those divisions in an index
expression and names their digits; the backend writes the start (the divisions, once) and the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
from torch.utils._sympy import functions as tf

_MODS = (tf.PythonMod, tf.Mod, sympy.Mod)


@dataclass(frozen=True)
class Digit:
    """quotient, remainder = divmod(argument, divisor) with Python's floor semantics, kept by counting.

    `argument` is the loop variable or the quotient of digit `parent`, plus a term the loop does not change;
    it grows by one with the loop variable (parent None) or whenever the parent carries. Counting is exact
    while the divisor is at least 1, which the code that counts checks before the loop."""

    quotient: sympy.Symbol
    remainder: sympy.Symbol
    argument: sympy.Expr
    divisor: sympy.Expr
    parent: int | None


@dataclass(frozen=True)
class CountedExpr:
    """`original` rewritten over the digits' symbols as `expr` (what is left of the loop variable in it is
    computed as before), and the digits in an order where each parent precedes its children."""

    original: sympy.Expr
    expr: sympy.Expr
    digits: tuple[Digit, ...]

    def children(self, parent: int | None) -> list[int]:
        return [i for i, d in enumerate(self.digits) if d.parent == parent]


def count_divisions(expr: sympy.Expr, var: sympy.Symbol, prefix: str) -> CountedExpr:
    """`expr` with each floor division and modulo of `var` + c (c free of `var`) by a divisor free of `var`,
    and of such a quotient + c in turn, replaced by a digit's symbol (named `prefix`q0, `prefix`r0, ...).
    Every symbol but `var` is taken to keep its value over the loop."""
    digits: list[Digit] = []
    keys: dict[tuple[sympy.Expr, sympy.Expr], int] = {}
    quotient_of: dict[sympy.Symbol, int] = {}

    def source(argument: sympy.Expr) -> int | None | bool:
        """The digit whose quotient `argument` counts (None: the loop variable itself), or False when it is
        neither plus a term the loop does not change."""
        for term in sympy.Add.make_args(argument):
            if term == var:
                rest = argument - var
                return None if not rest.free_symbols & ({var} | set(quotient_of)) else False
            if term in quotient_of:
                rest = argument - term
                return quotient_of[term] if not rest.free_symbols & ({var} | set(quotient_of)) else False
        return False

    def digit(argument: sympy.Expr, divisor: sympy.Expr) -> Digit | None:
        if divisor.free_symbols & ({var} | set(quotient_of)) or divisor.is_number and divisor < 1:
            return None
        parent = source(argument)
        if parent is False:
            return None
        key = (argument, divisor)
        if key not in keys:
            n = len(digits)
            q, r = sympy.Symbol(f"{prefix}q{n}", integer=True), sympy.Symbol(f"{prefix}r{n}", integer=True)
            keys[key] = n
            quotient_of[q] = n
            digits.append(Digit(q, r, argument, divisor, parent))
        return digits[keys[key]]

    def walk(e: sympy.Expr) -> sympy.Expr:
        if var not in e.free_symbols:
            return e
        args = [walk(a) for a in e.args]
        if isinstance(e, tf.FloorDiv):
            d = digit(args[0], args[1])
            return d.quotient if d else e.func(*args)
        if isinstance(e, _MODS):
            d = digit(args[0], args[1])
            return d.remainder if d else e.func(*args)
        if isinstance(e, tf.ModularIndexing):  # (x // div) % mod
            inner = digit(args[0], args[1])
            if inner is None:
                return e.func(*args)
            outer = digit(inner.quotient, args[2])
            return outer.remainder if outer else tf.PythonMod(inner.quotient, args[2])
        return e.func(*args) if args else e

    original = sympy.sympify(expr)
    return CountedExpr(original, walk(original), tuple(digits))
