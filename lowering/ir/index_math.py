"""Integer values computed from positions alone, as sympy expressions: what lets a mask built from aranges stay
index math instead of a stored tensor.

Models build causal and padding masks from positions: an arange, offset, broadcast, used as the index of another
arange (transformers' masking utilities index `cache_position[q_idx]`), compared with another. Each step is an
integer function of the loop indices and the symbols; folded into one sympy expression it can index a view
directly (no gather, no stored operand) and be reasoned about (ir/mask_structure.py proves causal structure).

Only exact integer arithmetic folds (add, sub, mul, neg, minimum, maximum, integer casts): sympy's integers do
not wrap, so a fold is only taken for int64 and int32 values, whose positions and sizes are far below 2**31.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from .scalar import Const, IndexValue, Node, Op
from .symbolic import value_range

FOLDED_DTYPES = ("int64", "int32")
Bounds = tuple[sympy.Expr, sympy.Expr]  # an index variable's least and greatest value
_ARITHMETIC = {"add": sympy.Add, "sub": lambda a, b: a - b, "mul": sympy.Mul, "neg": lambda a: -a,
               "minimum": sympy.Min, "maximum": sympy.Max}


def as_index_expr(node: Node) -> sympy.Expr | None:
    """The integer `node` as a sympy expression of index variables and symbols, or None if it reads memory,
    computes in floats or uses an op that does not fold exactly."""
    if node.dtype not in FOLDED_DTYPES:
        return None
    if isinstance(node, IndexValue):
        return node.expr
    if isinstance(node, Const):
        return sympy.Integer(int(node.value))
    if not isinstance(node, Op):
        return None
    if node.name == "cast":
        inner = node.args[0]
        return as_index_expr(inner) if inner.dtype in FOLDED_DTYPES else None
    fn = _ARITHMETIC.get(node.name)
    if fn is None:
        return None
    args = [as_index_expr(a) for a in node.args]
    if any(a is None for a in args):
        return None
    return sympy.expand(fn(*args))


def folded(node: Node) -> Node:
    """`node` as one IndexValue when it is index math (an arange's `0 + i * 1` becomes `i`), else unchanged."""
    if isinstance(node, (IndexValue, Const)):
        return node
    expr = as_index_expr(node)
    if expr is None:
        return node
    return Const(int(expr), node.dtype) if expr.is_Integer else IndexValue(expr, node.dtype)


def linear_bounds(expr: sympy.Expr, uppers: Mapping[sympy.Symbol, sympy.Expr]) -> tuple[sympy.Expr, sympy.Expr] | None:
    """The least and greatest value of `expr` over the box 0 <= v <= uppers[v] (see box_bounds)."""
    return box_bounds(expr, {v: (sympy.Integer(0), u) for v, u in uppers.items()})


def box_bounds(expr: sympy.Expr, box: Mapping[sympy.Symbol, Bounds]) -> tuple[sympy.Expr, sympy.Expr] | None:
    """The least and greatest value of `expr` over the box lo <= v <= hi, as expressions of the symbols, when
    `expr` is linear in the box's variables with constant coefficients (then the extremes sit at corners of
    the box, exactly; bounds may be symbolic, e.g. a row index 0 <= i <= seq - 1). None otherwise."""
    expr = sympy.expand(expr)
    lo = hi = expr
    for var, (low, high) in box.items():
        coeff = expr.coeff(var)
        if coeff == 0:
            continue
        if not coeff.is_number or any(var in t.free_symbols for t in sympy.Add.make_args(expr - coeff * var)):
            return None
        lo = lo.subs(var, high if coeff < 0 else low)
        hi = hi.subs(var, high if coeff > 0 else low)
    if (lo.free_symbols | hi.free_symbols) & set(box):
        return None
    return sympy.expand(lo), sympy.expand(hi)


def provably_nonnegative(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> bool:
    """Whether `expr` (of the symbols only) is >= 0 for every value of the symbols in their declared ranges."""
    expr = sympy.expand(expr)
    if expr.is_number:
        return bool(expr >= 0)
    if not expr.free_symbols <= set(ranges):
        return False
    bound = value_range(expr, ranges)
    return bool(bound.lower.is_number and bound.lower >= 0)


def provably_in_range(expr: sympy.Expr, size: sympy.Expr, uppers: Mapping[sympy.Symbol, sympy.Expr],
                      ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> bool:
    """Whether 0 <= expr <= size - 1 for every index in the box (see linear_bounds) and every symbol value."""
    bounds = linear_bounds(expr, uppers)
    if bounds is None:
        return False
    lo, hi = bounds
    return provably_nonnegative(lo, ranges) and provably_nonnegative(size - 1 - hi, ranges)
