"""Integer size expressions over the user's symbols: creation, bounds and evaluation.

Sizes, strides and offsets are sympy expressions, as in torch.export itself, so that the shapes torch
derives (conv output sizes, reshapes) arrive here without translation. They leave the compiler through
one printer (codegen/printer.py): JSON for the runtime's evaluator (docs/package-format.md), C++ and
Triton for the generated kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy
from torch.utils._sympy import functions as torch_sympy
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from ...errors import UnsupportedError

Expr = sympy.Expr
# torch.export's sizes use torch's own Max and Min (torch.utils._sympy.functions), not sympy's
MAXES, MINS = (sympy.Max, torch_sympy.Max), (sympy.Min, torch_sympy.Min)


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


def flat_offset(prefix: str, shape: Sequence[Expr], first: int = 0) -> Expr:
    """The row-major offset of element (v<first>, v<first+1>, ...) of `shape`, v being index variables of
    `prefix` (a kernel's i or r)."""
    strides = contiguous_strides(shape)
    return sympy.expand(sum((index_var(prefix, first + d) * s for d, s in enumerate(strides)), sympy.Integer(0)))


def unflatten(shape: Sequence[Expr], flat: Expr, prefix: str, first: int = 0) -> dict[sympy.Symbol, Expr]:
    """Each index variable of `shape` (v<first>, ... of `prefix`) from a row-major flat index into it."""
    from torch.utils._sympy import functions as tf

    out: dict[sympy.Symbol, Expr] = {}
    for d, (size, stride) in enumerate(zip(shape, contiguous_strides(shape))):
        var = index_var(prefix, first + d)
        if size == 1:
            out[var] = sympy.Integer(0)
        elif d == 0:  # the outermost dimension needs no wrap-around
            out[var] = flat if stride == 1 else tf.FloorDiv(flat, stride)
        else:
            out[var] = tf.ModularIndexing(flat, stride, size)
    return out


def upper_bound(expr: Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> int:
    """The largest value `expr` takes over the symbols' declared ranges (used to plan memory)."""
    return _integer_bound(expr, ranges, "upper")


def lower_bound(expr: Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> int:
    """The smallest value `expr` takes over the symbols' declared ranges."""
    return _integer_bound(expr, ranges, "lower")


def value_range(expr: Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> ValueRanges:
    """The values `expr` takes over the symbols' declared ranges (torch's bound_sympy), lower and upper."""
    return bound_sympy(expr, {s: ValueRanges(lo, hi) for s, (lo, hi) in ranges.items()})


def settled(expr: Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> Expr:
    """`expr` with each Max and Min resolved where the declared ranges decide it: an argument that another is
    never below (Max) or above (Min) dropped, and a Max or Min that takes one value over the ranges replaced by
    that value. torch.export keeps them as written: HF MPT's ALiBi slice `bias[max(0, 1 - n):]` of a size-1 dim
    is `1 - Max(0, 1 - n)` rows long, which is 1 for every n >= 1, and broadcasting must see that 1."""
    if not expr.has(*MAXES, *MINS):
        return expr

    def resolve(node: Expr) -> Expr:
        point = value_range(node, ranges)
        if point.lower == point.upper and point.lower.is_Integer:
            return point.lower
        sign = 1 if isinstance(node, MAXES) else -1
        kept = list(node.args)
        for arg in node.args:  # never above (Max) or below (Min) another argument over the ranges: dropped
            rest = [o for o in kept if o is not arg]
            if rest and any(value_range(sign * (o - arg), ranges).lower >= 0 for o in rest):
                kept = rest
        return type(node)(*kept)

    expr = expr.replace(lambda e: isinstance(e, MAXES + MINS), resolve)
    whole = value_range(expr, ranges)
    return whole.lower if whole.lower == whole.upper and whole.lower.is_Integer else expr


def _integer_bound(expr: Expr, ranges: Mapping[sympy.Symbol, tuple[int, int]], side: str) -> int:
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    bound = getattr(value_range(expr, ranges), side)
    if not bound.is_Integer:
        raise UnsupportedError(f"cannot bound the size {expr} over the declared ranges")
    return int(bound)


def fold_div_mod(expr: Expr) -> Expr:
    """`expr` with each pair c*q*(x // (d*q)) + c*((x // d) % q) folded into c*(x // d) (x // 1 is x; for
    nonnegative x, as indices are): what a reshape that splits a dimension and one that merges it back leave
    in an offset."""
    from torch.utils._sympy import functions as tf

    def split(term: Expr) -> tuple[Expr, Expr, Expr, Expr] | None:
        """(c, x, d, q) of a term c*((x // d) % q), else None."""
        coeff, mod = _factor_of(term, (tf.Mod, tf.PythonMod, sympy.Mod, tf.ModularIndexing))
        if mod is None:
            return None
        if isinstance(mod, tf.ModularIndexing):
            x, d, q = mod.args
            return coeff, x, d, q
        x, q = mod.args
        x, d = (x.args[0], x.args[1]) if isinstance(x, tf.FloorDiv) else (x, sympy.Integer(1))
        return coeff, x, d, q

    terms = list(sympy.Add.make_args(sympy.expand(expr)))
    changed = True
    while changed:
        changed = False
        for t in terms:
            coeff, div = _factor_of(t, tf.FloorDiv)
            if div is None:
                continue
            for u in terms:
                parts = split(u) if u is not t else None
                if parts is None:
                    continue
                c2, x, d, q = parts
                if sympy.expand(div.args[0] - x) == 0 and sympy.expand(div.args[1] - d * q) == 0 \
                        and sympy.expand(coeff - c2 * q) == 0:
                    whole = x if d == 1 else tf.FloorDiv(x, d)
                    terms = [v for v in terms if v is not t and v is not u] + [sympy.expand(c2 * whole)]
                    changed = True
                    break
            if changed:
                break
    return sympy.expand(sympy.Add(*terms))


def _factor_of(term: Expr, kinds) -> tuple[Expr, Expr | None]:
    """(the rest, the factor) when `term` is a product with exactly one factor of `kinds`."""
    factors = sympy.Mul.make_args(term)
    found = [f for f in factors if isinstance(f, kinds)]
    if len(found) != 1:
        return term, None
    return sympy.Mul(*[f for f in factors if f is not found[0]]), found[0]


def evaluate(expr: Expr, values: Mapping[sympy.Symbol, int]) -> int:
    result = sympy.sympify(expr).xreplace({s: sympy.Integer(v) for s, v in values.items()})
    if not result.is_Integer:
        raise UnsupportedError(f"the size {expr} does not evaluate to an integer at {dict(values)}")
    return int(result)


def affine_parts(offset: Expr, variables: Sequence[sympy.Symbol]) -> tuple[Expr, tuple[Expr, ...]] | None:
    """(base, strides) when offset = base + sum(strides[d] * variables[d]) with neither depending on the
    variables (a strided view's offset over its index); None otherwise."""
    offset = sympy.expand(offset)
    strides = tuple(sympy.expand(offset.coeff(v)) for v in variables)
    base = sympy.expand(offset - sum((s * v for s, v in zip(strides, variables)), sympy.Integer(0)))
    names = set(variables)
    if any(sympy.sympify(e).free_symbols & names for e in (base, *strides)):
        return None
    return base, strides


def column_of(offset: Expr, n: Expr, bounds: Mapping[sympy.Symbol, tuple[int, int]]) -> Expr | None:
    """The column of an offset into a contiguous [rows, n] buffer (offset = row * n + column), when the offset
    is a sum of terms that are n times an integer (the row) and terms that are proved to stay within 0..n-1
    together over `bounds` (the declared ranges and the index variables' extents); None otherwise."""
    if not sympy.sympify(n).is_Integer:
        return None
    column = []
    for term in sympy.Add.make_args(sympy.expand(offset)):
        if sympy.cancel(term / n).is_integer:
            continue  # n times an integer: part of the row
        column.append(term % n if term.is_Integer else term)  # a constant splits into whole rows and a column
    column = sympy.expand(sympy.Add(*column))
    try:
        span = value_range(column, bounds)
    except Exception:  # noqa: BLE001 - what bound_sympy cannot bound is not proved
        return None
    if not (span.lower.is_Integer and span.upper.is_Integer):
        return None
    return column if 0 <= int(span.lower) and int(span.upper) < int(n) else None


def extent_bounds(variables: Mapping[sympy.Symbol, Expr],
                  ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> dict[sympy.Symbol, tuple[int, int]]:
    """The declared ranges plus each index variable's 0..extent-1 at the extent's largest."""
    return {**ranges, **{v: (0, upper_bound(extent, ranges) - 1) for v, extent in variables.items()}}
