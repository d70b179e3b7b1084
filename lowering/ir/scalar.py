"""The scalar expression language of kernel bodies: what one output element is computed from.

A pointwise kernel stores one such expression per element; a reduction folds one over the reduced
indices. Nodes are frozen and hashable, so identical kernels compare equal and are generated once.
Dtypes are torch dtype names ("float32", "int64", "bool", ...): plain data for the templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import sympy

from .dtypes import is_int


@dataclass(frozen=True)
class Indirect:
    """An index taken from data (embedding, gather): `var` in the Load's index stands for `value`.

    The value is checked against 0..size-1 at run time (after adding `size` to negatives when `wrap`);
    a bad index is reported through the kernel ABI and clamped, never read out of bounds.
    """

    var: sympy.Symbol
    value: Node
    size: sympy.Expr
    wrap: bool
    what: str  # the message reported for a bad index: the op and the user's line


@dataclass(frozen=True)
class Load:
    buffer: str
    index: sympy.Expr  # element offset from the buffer's base, over loop indices and symbols
    dtype: str
    indirect: tuple[Indirect, ...] = ()


@dataclass(frozen=True)
class Const:
    value: Union[bool, int, float]
    dtype: str


@dataclass(frozen=True)
class IndexValue:
    """An index expression used as data (arange, masks built from positions)."""

    expr: sympy.Expr
    dtype: str


@dataclass(frozen=True)
class Op:
    """`name` applied to `args`; the lowering has already cast the args to the type the op computes in."""

    name: str
    args: tuple[Node, ...]
    dtype: str


Node = Union[Load, Const, IndexValue, Op]


def cast(node: Node, dtype: str) -> Node:
    if node.dtype == dtype:
        return node
    if isinstance(node, Const):
        return Const(_convert(node.value, dtype), dtype)
    if isinstance(node, IndexValue) and node.expr.is_Integer:
        return Const(_convert(int(node.expr), dtype), dtype)
    return Op("cast", (node,), dtype)


def _convert(value: Union[bool, int, float], dtype: str) -> Union[bool, int, float]:
    if dtype == "bool":
        return bool(value)
    if is_int(dtype):
        return int(value)
    return float(value)


def size_of(node: Node) -> int:
    """Number of nodes in the expression tree (how much work inlining it into a consumer repeats). Casts are
    not counted: kernels compute half values in float32, so a cast is at most the register conversion every
    half load and store makes anyway (addmm's bias add, two loads and an add, keeps its size with the casts
    around its float32 product)."""
    if isinstance(node, Op):
        return (node.name != "cast") + sum(size_of(a) for a in node.args)
    if isinstance(node, Load):
        return 1 + sum(size_of(i.value) for i in node.indirect)
    return 1


def loads(node: Node) -> list[Load]:
    """Every Load in the tree, outermost first."""
    out: list[Load] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Load):
            out.append(n)
            stack.extend(i.value for i in n.indirect)
        elif isinstance(n, Op):
            stack.extend(n.args)
    return out


def substitute(node: Node, indices: dict[sympy.Symbol, sympy.Expr], loads: dict[Load, Node] | None = None) -> Node:
    """The tree with index variables replaced by expressions (in every offset, bound and index value) and the
    loads in `loads` (matched as written, before the replacement) replaced by the nodes they map to."""
    loads = loads or {}

    def walk(n: Node) -> Node:
        if isinstance(n, Load):
            if n in loads:
                return loads[n]
            indirect = tuple(Indirect(i.var, walk(i.value), sympy.sympify(i.size).xreplace(indices), i.wrap, i.what)
                             for i in n.indirect)
            return Load(n.buffer, sympy.expand(sympy.sympify(n.index).xreplace(indices)), n.dtype, indirect)
        if isinstance(n, IndexValue):
            return IndexValue(sympy.sympify(n.expr).xreplace(indices), n.dtype)
        if isinstance(n, Op):
            return Op(n.name, tuple(walk(a) for a in n.args), n.dtype)
        return n

    return walk(node)


def map_indices(node: Node, fn) -> Node:
    """The tree with `fn` applied to every load's offset (fold_div_mod, say)."""
    if isinstance(node, Load):
        indirect = tuple(Indirect(i.var, map_indices(i.value, fn), i.size, i.wrap, i.what) for i in node.indirect)
        return Load(node.buffer, fn(node.index), node.dtype, indirect)
    if isinstance(node, Op):
        return Op(node.name, tuple(map_indices(a, fn) for a in node.args), node.dtype)
    return node


def map_exprs(node: Node, fn) -> Node:
    """The tree with `fn` applied to every size expression it holds: load offsets, indirect bounds, index values."""
    if isinstance(node, Load):
        indirect = tuple(Indirect(i.var, map_exprs(i.value, fn), fn(i.size), i.wrap, i.what) for i in node.indirect)
        return Load(node.buffer, fn(node.index), node.dtype, indirect)
    if isinstance(node, IndexValue):
        return IndexValue(fn(node.expr), node.dtype)
    if isinstance(node, Op):
        return Op(node.name, tuple(map_exprs(a, fn) for a in node.args), node.dtype)
    return node


def rename_buffer(node: Node, old: str, new: str) -> Node:
    """The tree reading buffer `new` wherever it read `old`."""
    if isinstance(node, Load):
        indirect = tuple(Indirect(i.var, rename_buffer(i.value, old, new), i.size, i.wrap, i.what) for i in node.indirect)
        return Load(new if node.buffer == old else node.buffer, node.index, node.dtype, indirect)
    if isinstance(node, Op):
        return Op(node.name, tuple(rename_buffer(a, old, new) for a in node.args), node.dtype)
    return node


def index_exprs(node: Node) -> list[sympy.Expr]:
    """Every size expression the tree uses: load offsets, indirect bounds, index values (a kernel's symbols)."""
    out: list[sympy.Expr] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Load):
            out.append(n.index)
            for ind in n.indirect:
                out.append(ind.size)
                stack.append(ind.value)
        elif isinstance(n, IndexValue):
            out.append(n.expr)
        elif isinstance(n, Op):
            stack.extend(n.args)
    return out
