"""The part of a kernel's innermost loop where its bounds tests hold: there, a body without them or their clamps.

Padding, a slice past an edge or a concatenation lower to a select on tests of the loop variable x
(`0 <= x - 1 < w`) whose value loads at a clamped index (`max(0, min(x - 1, w - 1))`), so that a lane the test
rejects still reads in bounds. A clamped index is a gather to a vectorising compiler, and the tests are lane
masks: the padding of a convolution's input ran at a few elements per nanosecond. Yet over most of the loop
every test holds and every clamp returns its argument. `peel` finds that range, as bounds on x the kernel
computes before the loop, and the body specialised to it: the tests are true, each select keeps the branch
they choose, and each clamp left in a live index is its argument (the range also ensures that). A backend
runs the specialised body there and the general one on either side.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..ir.dtypes import is_int
from ..ir.scalar import Const, IndexValue, Indirect, Load, Node, Op, loads

_TESTS = {"ge": (1, 0), "gt": (1, 1), "le": (-1, 0), "lt": (-1, 1)}  # a OP b as sign * (a - b) - shift >= 0


@dataclass(frozen=True)
class Peeled:
    """Over lower <= x < upper (the greatest of `lower`, the least of `upper`), `body` equals the original."""

    lower: tuple[sympy.Expr, ...]
    upper: tuple[sympy.Expr, ...]
    body: Node


def peel(value: Node, var: sympy.Symbol) -> Peeled | None:
    """The range where `value`'s tests of `var` hold and its clamps by `var` are their arguments, with `value`
    specialised to it; None when `value` has no such test or clamp (nothing to gain)."""
    lower: list[sympy.Expr] = []
    upper: list[sympy.Expr] = []
    # an index read from data is known only inside the loop: no bound may use one
    from_data = {i.var for load in loads(value) for i in load.indirect}

    def bound(expr: sympy.Expr) -> tuple[list[sympy.Expr], sympy.Expr] | None:
        """expr >= 0 as (the list it goes to, the bound) when expr is +-var plus terms free of var."""
        expr = sympy.expand(expr)
        coeff = expr.coeff(var)
        rest = sympy.expand(expr - coeff * var)
        if var in rest.free_symbols or coeff not in (1, -1) or rest.free_symbols & from_data:
            return None
        return (lower, -rest) if coeff == 1 else (upper, rest + 1)  # var >= -rest; var < rest + 1

    def require(*exprs: sympy.Expr) -> bool:
        """Records each expr >= 0 as a bound on var, if every one of them is one; False (nothing recorded)
        otherwise."""
        bounds = [bound(e) for e in exprs]
        if any(b is None for b in bounds):
            return False
        for side, limit in bounds:
            side.append(limit)
        return True

    def unclamp(expr: sympy.Expr) -> sympy.Expr:
        """`expr` with each max/min of var's affine argument and terms free of var made that argument."""
        if var not in expr.free_symbols or not expr.args:
            return expr
        args = [unclamp(a) for a in expr.args]
        if isinstance(expr, (sympy.Max, sympy.Min)):
            varying = [a for a in args if var in a.free_symbols]
            if len(varying) == 1:
                kept = varying[0]
                sign = 1 if isinstance(expr, sympy.Max) else -1  # max(a, c) is a where a >= c
                if require(*(sign * (kept - c) for c in args if c is not kept)):
                    return kept
        return expr.func(*args)

    def test(node: Op) -> bool | None:
        """True where `node` is a test of var that holds over the range (recorded), None for any other node."""
        if node.name not in _TESTS or not all(_is_index(a) for a in node.args):
            return None
        a, b = (_expr(x) for x in node.args)
        sign, shift = _TESTS[node.name]
        if var not in (a - b).free_symbols:
            return None
        return True if require(sign * (a - b) - shift) else None

    def walk(node: Node) -> Node:
        if isinstance(node, IndexValue):
            return IndexValue(unclamp(node.expr), node.dtype)
        if isinstance(node, Load):
            indirect = tuple(Indirect(i.var, walk(i.value), i.size, i.wrap, i.what) for i in node.indirect)
            return Load(node.buffer, unclamp(node.index), node.dtype, indirect)
        if not isinstance(node, Op):
            return node
        if test(node):
            return Const(True, "bool")
        if node.name == "where":  # only the chosen branch is walked: the other's clamps need not hold
            cond = walk(node.args[0])
            if isinstance(cond, Const):
                return walk(node.args[1] if cond.value else node.args[2])
            return Op("where", (cond, walk(node.args[1]), walk(node.args[2])), node.dtype)
        args = tuple(walk(a) for a in node.args)
        if node.name == "logical_and":
            kept = [a for a in args if not (isinstance(a, Const) and a.value)]
            if any(isinstance(a, Const) and not a.value for a in kept):
                return Const(False, "bool")
            if not kept:
                return Const(True, "bool")
            if len(kept) == 1:
                return kept[0]
        return Op(node.name, args, node.dtype)

    body = walk(value)
    if not lower and not upper:
        return None
    return Peeled(tuple(dict.fromkeys(lower)), tuple(dict.fromkeys(upper)), body)


def _is_index(node: Node) -> bool:
    """An integer computed from indices: an index value, or an integer constant."""
    return isinstance(node, (IndexValue, Const)) and is_int(node.dtype)


def _expr(node: Node) -> sympy.Expr:
    return node.expr if isinstance(node, IndexValue) else sympy.Integer(int(node.value))
