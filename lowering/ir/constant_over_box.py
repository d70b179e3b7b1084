"""Whether an integer or boolean expression of positions is one constant over a box of indices, proved by
splitting the box where the expression's comparisons change.

transformers' masks carry a packed-sequence term: `(diff(position_ids) != 1).cumsum(-1)`, compared at the row
and at the key. For positions that are an arange the differences are all 1 and the sum is 0, but seeing it
takes cases: the first position's difference comes from a prepended `position_ids[:, :1] - 1`, the others from
clamped neighbours (`Min(r, seq - 1) - Max(0, Min(r - 1, seq - 1))`). The proof here is general: decide every
comparison and min/max over the box from the exact bounds of linear index math (ir/index_math.py); where one
is undecided, split the box at a point where a one-variable comparison (`r < 1`) or min/max choice of the
expression changes (at most MAX_CUTS splits deep), and require both halves to give the same value. Anything not decided gives None: callers then keep the computation.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import sympy

from .index_math import FOLDED_DTYPES, Bounds, box_bounds, provably_nonnegative
from .scalar import Const, IndexValue, Node, Op, cast
from .symbolic import index_var, product

MAX_CUTS = 4
_ARITHMETIC = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
               "neg": lambda a: -a, "minimum": sympy.Min, "maximum": sympy.Max}
# comparison -> (sign, strict): `a OP b` holds iff sign * (b - a) >= 0 (> 0 when strict); eq/ne separately
_ORDER = {"le": (1, False), "lt": (1, True), "ge": (-1, False), "gt": (-1, True)}
Ranges = Mapping[sympy.Symbol, tuple[int, int]]
Value = sympy.Expr | bool | None  # an integer expression, a decided boolean, or undecided


def constant_over_box(node: Node, box: Mapping[sympy.Symbol, Bounds], ranges: Ranges) -> int | bool | None:
    """The value `node` takes at every index of `box` (each variable's inclusive bounds, expressions of the
    symbols) for every symbol value in `ranges`, or None when that is not proved."""
    if node.dtype not in (*FOLDED_DTYPES, "bool"):
        return None
    return _constant_in(node, dict(box), ranges, _cuts(node, box), MAX_CUTS)


def _constant_in(node: Node, box: dict[sympy.Symbol, Bounds], ranges: Ranges,
                 cuts: list[tuple[sympy.Symbol, sympy.Expr]], depth: int) -> int | bool | None:
    """The constant value of `node` over `box`; where it is not decided there, the box is split at the first
    cut inside it (var <= t - 1 | var >= t) and both halves must agree."""
    value = _value(node, box, ranges)
    if isinstance(value, bool):
        return value
    if isinstance(value, sympy.Expr) and value.is_Integer:
        return int(value)
    if depth == 0:
        return None
    for var, at in cuts:
        lo, hi = box[var]
        if provably_nonnegative(lo - at, ranges) or provably_nonnegative(at - 1 - hi, ranges):
            continue  # the whole box lies on one side of this cut
        results = []
        for half in ((lo, at - 1), (at, hi)):
            results.append(_constant_in(node, {**box, var: half}, ranges, cuts, depth - 1))
        if results[0] is None or results[0] != results[1] or type(results[0]) is not type(results[1]):
            return None
        return results[0]
    return None


def _cuts(node: Node, box: Mapping[sympy.Symbol, Bounds]) -> list[tuple[sympy.Symbol, sympy.Expr]]:
    """(v, t): places where a comparison or a min/max of the expression may change, as v >= t, for the
    comparisons and min/max choices that involve one box variable with coefficient +-1."""
    found: dict[tuple[sympy.Symbol, sympy.Expr], None] = {}

    def cut_of(diff: sympy.Expr) -> None:  # `diff` is 0 at var = zero: cut below, at and above that point
        diff = sympy.expand(diff)
        used = [v for v in box if v in diff.free_symbols]
        if len(used) != 1:
            return
        var = used[0]
        coeff = diff.coeff(var)
        rest = sympy.expand(diff - coeff * var)
        if coeff in (1, -1) and not rest.free_symbols & set(box):
            zero = sympy.expand(-rest * coeff)
            found[(var, zero)] = None
            found[(var, zero + 1)] = None

    def visit_expr(expr: sympy.Expr) -> None:
        for sub in sympy.preorder_traversal(expr):
            if isinstance(sub, (sympy.Min, sympy.Max)):
                for a, b in itertools.combinations(sub.args, 2):
                    cut_of(a - b)

    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, IndexValue):
            visit_expr(n.expr)
        elif isinstance(n, Op):
            stack.extend(n.args)
            if n.name in (*_ORDER, "eq", "ne"):
                sides = [_plain(a) for a in n.args]
                if all(s is not None for s in sides):
                    cut_of(sides[1] - sides[0])
    return list(found)


def _plain(node: Node) -> sympy.Expr | None:
    """An integer node as a sympy expression, min and max kept (for finding cuts only)."""
    if isinstance(node, IndexValue):
        return node.expr
    if isinstance(node, Const) and not isinstance(node.value, float):
        return sympy.Integer(int(node.value))
    if isinstance(node, Op) and node.name in _ARITHMETIC and node.dtype in FOLDED_DTYPES:
        args = [_plain(a) for a in node.args]
        return None if any(a is None for a in args) else _ARITHMETIC[node.name](*args)
    if isinstance(node, Op) and node.name == "cast" and node.args[0].dtype in FOLDED_DTYPES:
        return _plain(node.args[0])
    return None


def _value(node: Node, box: Mapping[sympy.Symbol, Bounds], ranges: Ranges) -> Value:
    if isinstance(node, Const):
        if isinstance(node.value, bool):
            return node.value
        return sympy.Integer(node.value) if isinstance(node.value, int) else None
    if isinstance(node, IndexValue):
        return _decided_min_max(node.expr, box, ranges)
    if not isinstance(node, Op):
        return None  # a load: not a function of positions
    if node.name == "where":
        cond = _value(node.args[0], box, ranges)
        if cond is True or cond is False:
            return _value(node.args[1 if cond else 2], box, ranges)
        a, b = (_value(x, box, ranges) for x in node.args[1:])
        return a if _same(a, b) else None  # either branch: the same value
    args = [_value(a, box, ranges) for a in node.args]
    if node.name == "cast":
        (arg,) = args
        if node.dtype == "bool":
            return _decided(arg, box, ranges, 0, "ne") if isinstance(arg, sympy.Expr) else arg
        if node.dtype in FOLDED_DTYPES:
            if isinstance(arg, bool):
                return sympy.Integer(int(arg))
            return arg if node.args[0].dtype in FOLDED_DTYPES else None
        return None
    if node.name in ("logical_not", "bitwise_not") and node.dtype == "bool":
        return None if args[0] is None else not args[0]
    if node.name in ("logical_and", "bitwise_and", "logical_or", "bitwise_or") and node.dtype == "bool":
        conj = node.name.endswith("and")
        if any(a is (not conj) for a in args):
            return not conj
        return conj if all(a is conj for a in args) else None
    if node.name in _ARITHMETIC and node.dtype in FOLDED_DTYPES:
        if any(not isinstance(a, sympy.Expr) for a in args):
            return None
        return _decided_min_max(sympy.expand(_ARITHMETIC[node.name](*args)), box, ranges)
    if node.name in (*_ORDER, "eq", "ne") and all(isinstance(a, sympy.Expr) for a in args):
        return _decided(args[0], box, ranges, args[1], node.name)
    return None


def _same(a: Value, b: Value) -> bool:
    if isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr):
        return sympy.expand(a - b) == 0
    return a is not None and a is b


def _decided(a: sympy.Expr, box: Mapping[sympy.Symbol, Bounds], ranges: Ranges, b: sympy.Expr | int,
             name: str) -> bool | None:
    """`a name b` when it holds or fails over the whole box, else None."""
    bounds = box_bounds(sympy.expand(b - a), box)  # of b - a
    if bounds is None:
        return None
    lo, hi = bounds
    if name in ("eq", "ne"):
        if provably_nonnegative(lo, ranges) and provably_nonnegative(-hi, ranges):
            return name == "eq"  # b - a is 0 everywhere
        if provably_nonnegative(lo - 1, ranges) or provably_nonnegative(-hi - 1, ranges):
            return name == "ne"
        return None
    sign, strict = _ORDER[name]
    lo, hi = (lo, hi) if sign > 0 else (-hi, -lo)
    need = 1 if strict else 0
    if provably_nonnegative(lo - need, ranges):
        return True
    if provably_nonnegative(need - 1 - hi, ranges):
        return False
    return None


def _decided_min_max(expr: sympy.Expr, box: Mapping[sympy.Symbol, Bounds], ranges: Ranges) -> sympy.Expr:
    """`expr` with each min (max) replaced by the argument that is provably least (greatest) over the box."""
    if not isinstance(expr, sympy.Basic) or not expr.args:
        return expr
    args = [_decided_min_max(a, box, ranges) for a in expr.args]
    if isinstance(expr, (sympy.Min, sympy.Max)):
        sign = 1 if isinstance(expr, sympy.Min) else -1
        for a in args:
            others = [b for b in args if b is not a]
            if all(_nonnegative_over(sign * (b - a), box, ranges) for b in others):
                return a
        return type(expr)(*args)
    return sympy.expand(expr.func(*args))


def _nonnegative_over(expr: sympy.Expr, box: Mapping[sympy.Symbol, Bounds], ranges: Ranges) -> bool:
    bounds = box_bounds(expr, box)
    return bounds is not None and provably_nonnegative(bounds[0], ranges)


def constant_reduction(body: Node, shape: tuple[sympy.Expr, ...], reduced: tuple[sympy.Expr, ...], op: str,
                       out_dtype: str, ranges: Ranges) -> Node | None:
    """The result of folding `op` over `reduced` when the reduction's body (over i0.. for `shape`, r0.. for
    `reduced`) is one constant: a sum is the constant times the count (zero for the packed-sequence term of
    transformers' masks), so no kernel runs. None otherwise, or for ops this does not fold."""
    if op != "sum":
        return None
    box = {index_var("i", d): (sympy.Integer(0), size - 1) for d, size in enumerate(shape)}
    box.update({index_var("r", d): (sympy.Integer(0), size - 1) for d, size in enumerate(reduced)})
    value = constant_over_box(body, box, ranges)
    if value is None:
        return None
    total = sympy.expand(int(value) * product(reduced))
    if total.is_Integer:
        return cast(Const(int(total), "int64"), out_dtype)
    return cast(IndexValue(total, "int64"), out_dtype)
