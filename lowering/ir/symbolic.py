"""Integer size expressions over the user's symbols: creation, bounds and evaluation.

Sizes, strides and offsets are sympy expressions, as in torch.export itself, so that the shapes torch
derives (conv output sizes, reshapes) arrive here without translation. They leave the compiler through
one printer (codegen/printer.py): JSON for the runtime's evaluator (docs/package-format.md), C++ and
Triton for the generated kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy
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


def lower_bound(expr: Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> int:
    """The smallest value `expr` takes over the symbols' declared ranges."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    bound = bound_sympy(expr, {s: ValueRanges(lo, hi) for s, (lo, hi) in ranges.items()})
    if not bound.lower.is_Integer:
        raise UnsupportedError(f"cannot bound the size {expr} over the declared ranges")
    return int(bound.lower)


def evaluate(expr: Expr, values: Mapping[sympy.Symbol, int]) -> int:
    result = sympy.sympify(expr).xreplace({s: sympy.Integer(v) for s, v in values.items()})
    if not result.is_Integer:
        raise UnsupportedError(f"the size {expr} does not evaluate to an integer at {dict(values)}")
    return int(result)
