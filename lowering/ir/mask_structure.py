"""Causal structure in an attention mask, proved from the mask's expression: what lets a mask that a model
builds from positions skip whole key blocks, as `is_causal` does.

An attention mask (AttentionKernel.mask) is a scalar expression of i0..i3 (batch, head, row i, key j). A key
is *excluded* where a boolean mask is false, or where a float mask is -inf. The mask is causal with offset c
when one of its exclusion terms is exactly "j <= i + c": a comparison of two integer index expressions
(ir/index_math.py) that, moved to one side, reads a * (i - j) + e >= 0 with a > 0 a constant and e free of
every index (a number or an expression of the symbols). Then keys j > i + c never count, and inside
j <= i + c the term is true, so the kernel may drop the term and skip those keys: that is the proof, whatever
spelling produced it (arange offsets, `kv_idx <= q_idx`, `q_idx - kv_idx >= 0`, `not (j > i)`, tril).

Only -inf and false exclude: a float mask's large negative (finfo.min) still lets a row whose every key is
masked average all its keys, which skipping keys would change; such masks are kept whole.

A float mask that only ever adds 0 or -inf (`where(c, 0, -inf)`: what torch.export makes of sdpa's boolean
mask, and the padding masks of transformers' sdpa path) is the boolean mask c (`as_selection`): adding 0 keeps
a finite score and adding -inf gives -inf, as selecting does, so the kernels take the boolean form, whose
softmax folds its scale into the exponential (templates/triton/attention.py.jinja).

A mask of the key alone (padding) is used at run time instead (`skips_dead_keys`): the kernel first finds the
first and last key block in which the mask leaves a score and walks only those. Skipping a block in which
every score is masked, by false, -inf or an additive value at most DEAD_SCORE, is exact for every row that has
an unmasked key elsewhere (the block would add exp(-inf) = 0 and leave the row's maximum as it is); a mask of
the key alone gives every row the same keys, and when no key is unmasked the kernel walks every block, as
without the scan (so finfo.min's average over a fully masked row is kept).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sympy

from .constant_over_box import constant_over_box
from .index_math import as_index_expr
from .scalar import Const, Node, Op, index_exprs
from .symbolic import index_var

if TYPE_CHECKING:
    from .kernels import AttentionKernel

# An additive mask value at or below this removes its score exactly: s + mask - max underflows exp to 0 for any
# score a float32 dot product of real data gives (|s| far below 1e29). finfo(float32 or bfloat16).min
# (transformers' padding masks) and -inf are below it; float16's min (-65504) is not.
DEAD_SCORE = -1e30

_AND = ("logical_and", "bitwise_and")
_NOT = ("logical_not", "bitwise_not")
# comparison -> (sign, strict): `a OP b` holds iff sign * (b - a) >= 0 (> 0 when strict)
_COMPARISONS = {"le": (1, False), "lt": (1, True), "ge": (-1, False), "gt": (-1, True)}
_NEGATED = {"le": "gt", "lt": "ge", "ge": "lt", "gt": "le"}


@dataclass(frozen=True)
class CausalSplit:
    """The mask is `j <= i + offset` and `rest` (None: nothing else masks)."""

    offset: sympy.Expr
    rest: Node | None


def skips_dead_keys(k: AttentionKernel) -> bool:
    """Whether the kernel walks only the key blocks its mask leaves a score in: a mask of the key alone (no
    query row in its expression), not causal (whose blocks are bounded by the diagonal already)."""
    if k.mask is None or k.causal:
        return False
    return all(index_var("i", 2) not in e.free_symbols for e in index_exprs(k.mask))


def causal_split(mask: Node) -> CausalSplit | None:
    """The causal term of `mask` and what remains of it without that term, or None if none is proved."""
    for term in _exclusion_terms(mask):
        offset = causal_offset(term)
        if offset is not None:
            return CausalSplit(offset, _without_term(mask, term))
    return None


def as_selection(mask: Node) -> Node | None:
    """The boolean c where the float `mask` adds exactly 0 where c holds and -inf where it does not, else None:
    `where(c, 0, -inf)`, `where(c, -inf, 0)` (not c), casts of them, and sums of them (their conjunction)."""
    while isinstance(mask, Op) and mask.name == "cast" and mask.dtype != "bool":
        mask = mask.args[0]
    if mask.dtype == "bool":
        return None  # a float cast of a boolean adds 1 or 0
    if isinstance(mask, Op) and mask.name == "where":
        cond, then, other = mask.args
        if _is_zero(then) and _is_neg_inf(other):
            return cond
        if _is_neg_inf(then) and _is_zero(other):
            return Op("logical_not", (cond,), "bool")
        return None
    if isinstance(mask, Op) and mask.name == "add":
        terms = [as_selection(arg) for arg in mask.args]
        if all(t is not None for t in terms):
            return Op("logical_and", tuple(terms), "bool")
    return None


def causal_offset(term: Node) -> sympy.Expr | None:
    """c when the boolean `term` holds exactly where j <= i + c (i = i2, j = i3), else None."""
    negate = False
    while isinstance(term, Op) and term.name in _NOT and term.dtype == "bool":
        term, negate = term.args[0], not negate
    if not isinstance(term, Op) or term.name not in _COMPARISONS:
        return None
    name = _NEGATED[term.name] if negate else term.name
    lhs, rhs = (as_index_expr(a) for a in term.args)
    if lhs is None or rhs is None:
        return None
    sign, strict = _COMPARISONS[name]
    diff = sympy.expand(sign * (rhs - lhs) - (1 if strict else 0))  # the term holds iff diff >= 0 (integers)
    row, key = index_var("i", 2), index_var("i", 3)
    a, b = diff.coeff(row), diff.coeff(key)
    rest = sympy.expand(diff - a * row - b * key)
    if not (a.is_number and a > 0 and sympy.expand(a + b) == 0):
        return None
    if rest.free_symbols & {index_var("i", d) for d in range(4)}:
        return None  # a per-batch or per-head offset, or a term not linear in i and j
    if a == 1:
        return rest  # i - j + rest >= 0 <=> j <= i + rest
    if rest.is_number:
        return sympy.floor(rest / a)
    return None


def with_decided_comparisons(mask: Node, sizes: Sequence[sympy.Expr],
                              ranges: Mapping[sympy.Symbol, tuple[int, int]]) -> Node | None:
    """`mask` with every comparison of index math that holds (or fails) for every index of the mask's `sizes`
    [batch, heads, rows, keys] and every symbol value replaced by true (false), simplified; None if nothing is
    left to mask. transformers' padding mask carries `q_idx >= 0` (true), its causal masks a packed-sequence
    equality of two zeros (ir/constant_over_box.py), which the kernel then never computes."""
    box = {index_var("i", d): (sympy.Integer(0), size - 1) for d, size in enumerate(sizes)}

    def decide(node: Node) -> Node:
        if not isinstance(node, Op):
            return node
        if node.name in (*_COMPARISONS, "eq", "ne"):
            value = constant_over_box(node, box, ranges)
            if value is not None:
                return Const(bool(value), "bool")
        return Op(node.name, tuple(decide(a) for a in node.args), node.dtype)

    return _nothing_left(_simplified(decide(mask)))


def _exclusion_terms(mask: Node) -> list[Node]:
    """Boolean subterms whose falsity alone excludes the key, in the order they appear."""
    if mask.dtype == "bool":
        return _conjuncts(mask)
    if isinstance(mask, Op) and mask.name == "where":
        cond, then, other = mask.args
        terms = _conjuncts(cond) if _is_neg_inf(other) else []
        return terms + _exclusion_terms(then)
    if isinstance(mask, Op) and mask.name == "add":
        return [t for arg in mask.args for t in _exclusion_terms(arg)]
    return []


def _conjuncts(node: Node) -> list[Node]:
    if isinstance(node, Op) and node.name in _AND and node.dtype == "bool":
        return [t for arg in node.args for t in _conjuncts(arg)]
    if isinstance(node, Op) and node.name == "where" and node.dtype == "bool" and node.args[2] == Const(False, "bool"):
        return _conjuncts(node.args[0]) + _conjuncts(node.args[1])  # where(c, a, false) is c and a (tril)
    return [node]


def _is_neg_inf(node: Node) -> bool:
    while isinstance(node, Op) and node.name == "cast":
        node = node.args[0]
    return isinstance(node, Const) and node.value == float("-inf")


def _is_zero(node: Node) -> bool:
    while isinstance(node, Op) and node.name == "cast":
        node = node.args[0]
    return isinstance(node, Const) and node.dtype != "bool" and node.value == 0


def _without_term(mask: Node, term: Node) -> Node | None:
    """`mask` with `term` true, simplified; None if nothing is left to mask. Exact where j <= i + c, the
    only keys the kernel then evaluates the mask for."""
    return _nothing_left(_simplified(_replaced(mask, term, Const(True, "bool"))))


def _nothing_left(mask: Node) -> Node | None:
    """None for a mask that masks nothing (true, or an additive zero)."""
    if isinstance(mask, Const) and (mask.value is True or (mask.dtype != "bool" and mask.value == 0)):
        return None
    return mask


def _replaced(node: Node, old: Node, new: Node) -> Node:
    if node == old:
        return new
    if isinstance(node, Op):
        return Op(node.name, tuple(_replaced(a, old, new) for a in node.args), node.dtype)
    return node


def _simplified(node: Node) -> Node:
    """True conjuncts dropped, where(true, a, b) -> a, x + 0 -> x: what removing a term leaves behind."""
    if not isinstance(node, Op):
        return node
    args = tuple(_simplified(a) for a in node.args)
    if node.name in _AND and node.dtype == "bool":
        kept = [a for a in args if not (isinstance(a, Const) and a.value is True)]
        if not kept:
            return Const(True, "bool")
        return kept[0] if len(kept) == 1 else Op(node.name, tuple(kept), node.dtype)
    if node.name == "where" and isinstance(args[0], Const):
        chosen = args[1] if args[0].value else args[2]
        return chosen if chosen.dtype == node.dtype else Op("cast", (chosen,), node.dtype)
    if node.name == "add":
        kept = [a for a in args if not (isinstance(a, Const) and a.value == 0)]
        if len(kept) == 1 and kept[0].dtype == node.dtype:
            return kept[0]
        if not kept:
            return Const(0.0, node.dtype)
    return Op(node.name, args, node.dtype)
