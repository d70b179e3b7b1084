"""One writer of kernel bodies: scalar expression trees (ir/scalar.py) to statements of a language.

The writer owns what every language shares: each distinct subexpression computed once into a numbered
temporary, indices read from data bound before the load that uses them, and (where the renderer names
the innermost loop variables) the loop-invariant part of an offset hoisted out of the innermost loop.
How a constant, a load, an op or a checked index is written is the `BodySpelling`'s, one per language
(backends/cpu/spelling.py, backends/cuda/spelling.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import sympy

from ..ir.dtypes import compute_dtype
from ..ir.scalar import Const, IndexValue, Indirect, Load, Node, Op
from .printer import IndexSpelling, print_expr


@dataclass(frozen=True)
class Check:
    """A run-time check: where `condition` holds (on an active lane), the kernel reports `what`."""

    condition: str
    what: str


class BodySpelling:
    """What a language says for each part of a kernel body. `writer` is the BodyWriter asking, for spellings
    that need temporaries of their own (`writer.temp`) or report checks (`writer.checks`)."""

    index: IndexSpelling
    types: dict[str, str]  # dtype -> the language's name of the type a value is computed in

    def assign(self, name: str, type_name: str, expr: str) -> str:
        """The statement binding temporary `name` (of `type_name`) to `expr`."""
        raise NotImplementedError

    def const(self, value: object, dtype: str) -> str:
        raise NotImplementedError

    def index_value(self, index: str, dtype: str) -> str:
        """An index expression used as data, computed as `dtype`."""
        raise NotImplementedError

    def load(self, writer: BodyWriter, node: Load, pointer: str, offset: str) -> str:
        """The element at `offset` of the buffer named `pointer`, as its compute type."""
        raise NotImplementedError

    def checked_position(self, writer: BodyWriter, ind: Indirect, position: str) -> str:
        """`position` (read from data) checked against 0..size-1: a bad one is reported, never read."""
        raise NotImplementedError

    def op(self, writer: BodyWriter, node: Op, args: list[str]) -> str:
        raise NotImplementedError


class BodyWriter:
    """Turns scalar expression trees into statements (`lines`), computing each distinct subexpression once.

    `inner`: loop variables of the innermost loop(s). The part of an offset that uses none of them is computed
    once before that loop (`hoisted`), which also lets a C++ compiler vectorise the loop."""

    def __init__(self, spelling: BodySpelling, arg_names: dict[str, str], symbol_names: dict[sympy.Symbol, str],
                 inner: frozenset[sympy.Symbol] = frozenset(), prefix: str = "t") -> None:
        self.spelling = spelling
        self.arg_names = arg_names
        self.symbol_names = symbol_names
        self.inner = inner
        self.prefix = prefix
        self.lines: list[str] = []
        self.hoisted: list[str] = []
        self.checks: list[Check] = []
        self._hoisted_names: dict[sympy.Expr, str] = {}
        self._cache: dict[Node, str] = {}

    def sibling(self, prefix: str) -> BodyWriter:
        """A writer of another body for the same loop (one specialised to part of it, codegen/peeling.py): its
        own temporaries, named `prefix`0, ..., and the same offsets hoisted before the loop and checks."""
        other = BodyWriter(self.spelling, self.arg_names, self.symbol_names, self.inner, prefix)
        other.hoisted, other._hoisted_names, other.checks = self.hoisted, self._hoisted_names, self.checks
        return other

    def index(self, expr: sympy.Expr, extra: dict[sympy.Symbol, str] | None = None) -> str:
        return print_expr(expr, self.spelling.index, {**self.symbol_names, **(extra or {})})

    def temp(self, expr: str, type_name: str = "") -> str:
        name = f"{self.prefix}{len(self.lines)}"
        self.lines.append(self.spelling.assign(name, type_name, expr))
        return name

    def bind(self, node: Node, expr: str) -> None:
        """Let `node` stand for `expr`, already computed by the template (a matmul epilogue's product)."""
        self._cache[node] = expr

    def value(self, node: Node) -> str:
        if node in self._cache:
            return self._cache[node]
        type_name = self.spelling.types[compute_dtype(node.dtype)]
        if isinstance(node, Const):
            out = self.spelling.const(node.value, node.dtype)
        elif isinstance(node, IndexValue):
            out = self.temp(self.spelling.index_value(self.split_index(node.expr), node.dtype), type_name)
        elif isinstance(node, Load):
            offset = self.offset(node)
            out = self.temp(self.spelling.load(self, node, self.arg_names[node.buffer], offset), type_name)
        else:
            args = [self.value(a) for a in node.args]
            out = self.temp(self.spelling.op(self, node, args), type_name)
        self._cache[node] = out
        return out

    def offset(self, node: Load) -> str:
        """The element offset `node` addresses, its indices from data checked."""
        extra = {ind.var: self.spelling.checked_position(self, ind, self.value(ind.value)) for ind in node.indirect}
        return self.split_index(node.index, extra)

    def split_index(self, index: sympy.Expr, extra: dict[sympy.Symbol, str] | None = None) -> str:
        extra = extra or {}
        if not self.inner:
            return self.index(index, extra)
        terms = sympy.Add.make_args(sympy.expand(index))
        # A constant term stays beside the loop variable rather than in the hoisted base, so that offsets one
        # constant apart share one base: the compiler then sees their loads as one interleaved group (a 2x2
        # pool's in[b + 2i] and in[b + 1 + 2i]), loads it whole, and needs no scalar iterations at the loop's
        # end for a gap it cannot prove safe to read (which cost a 16-wide loop most of its vector work).
        outer = [t for t in terms if not t.is_number and not (t.free_symbols & self.inner)
                 and not (t.free_symbols & set(extra))]
        if not outer:
            return self.index(index, extra)
        base = sympy.Add(*outer)
        if base not in self._hoisted_names:
            name = f"o{len(self._hoisted_names)}"
            self._hoisted_names[base] = name
            self.hoisted.append(self.spelling.assign(name, self.spelling.types["int64"], self.index(base)))
        rest = sympy.Add(*[t for t in terms if t not in outer])
        return f"{self._hoisted_names[base]} + {self.index(rest, extra)}"


def chebyshev_series(writer: BodyWriter, node: Op, args: list[str]) -> str:
    """Op("chebyshev", (x, c0, c1, ...)): the Chebyshev series Cephes' chbevl sums (eager's i0, i1 and their
    scaled forms), by its recurrence b0 = x * b1 - b2 + c_i from b0 = c0, then (b0 - b2) / 2, in that order of
    operations, one temporary a step. A recurrence: as a tree of scalar ops each step would repeat the two
    before it, a tree that doubles with every coefficient. The same statements in every language."""
    spell, dtype = writer.spelling, node.dtype
    type_name = spell.types[compute_dtype(dtype)]
    x, coefficients = args[0], args[1:]
    b0, b1, b2 = coefficients[0], spell.const(0.0, dtype), spell.const(0.0, dtype)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = writer.temp(f"{x} * {b1} - {b2} + {c}", type_name)
    return f"{spell.const(0.5, dtype)} * ({b0} - {b2})"


def split_independent(lines: list[str], names: frozenset[str],
                      assignment: Callable[[str], tuple[str, str] | None]) -> tuple[list[str], list[str]]:
    """A body's statements split, each part in its order, into those that use none of `names` nor a name
    assigned from them (which may run earlier, or once outside a loop), and the rest. `assignment` parses a
    statement into (the name it assigns, its expression), or None: from such a statement on, all are the rest."""
    independent: list[str] = []
    dependent: list[str] = []
    tainted, opaque = set(names), False
    for line in lines:
        parsed = None if opaque else assignment(line)
        if parsed is None:
            opaque = True
            dependent.append(line)
            continue
        name, expr = parsed
        if set(re.findall(r"[A-Za-z_]\w*", expr)) & tainted:
            tainted.add(name)
            dependent.append(line)
        else:
            independent.append(line)
    return independent, dependent

