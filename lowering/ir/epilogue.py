"""Matrix-product epilogues: the pointwise kernel that consumes a product element by element, fused into it.

nn.Linear lowers to a product and a bias add, GPT-2's MLP to a product and a bias + GELU, a residual block to
a product and a bias + residual add: each a pointwise kernel that reads the product's output once, at the
element it writes. Run separately, that is one more launch and one more pass over memory per product; fused,
the product's kernel computes the pointwise expression on its tile before storing it (MatmulKernel.epilogue),
in every backend, from this one rule.

A pointwise step P is fused into the product M that writes the buffer X when:
- X is an intermediate that only P reads, and P reads it only at P's own element (the contiguous offset of
  P's index): P's output and X then hold the same elements in the same order;
- the product and P's output are floating (float32, float16, bfloat16: the float templates');
- P's shape splits into leading dimensions that cover the product's rows (batch x m) and trailing ones that
  cover its columns (n), so each index of P is computed from the product's row or column alone;
- no step between M and P writes what P reads, or touches P's output.
The fused kernel writes P's output; X is gone. The product's value is rounded to its dtype before the
epilogue, as X was stored, so a fused program computes what the unfused one did, bit for bit.
"""

from __future__ import annotations

from dataclasses import replace

import sympy

from . import scalar
from .kernels import ACC, Kernel, MatmulKernel, PointwiseKernel, Program, epilogue_vars, product_value
from .scalar import Load
from .symbolic import (
    column_of,
    contiguous_strides,
    extent_bounds,
    fold_div_mod,
    index_var,
    product,
    unflatten,
)

FLOAT_PRODUCTS = ("float32", "float16", "bfloat16")


def fuse_epilogues(program: Program) -> Program:
    steps = list(program.steps)
    buffers = dict(program.buffers)
    t = 0
    while t < len(steps):
        fused = _fuse_one(steps, t, program)
        if fused is None:
            t += 1
            continue
        reader, kernel = fused
        del buffers[steps[t].output]
        steps[t] = kernel
        del steps[reader]
    return replace(program, steps=tuple(steps), buffers=buffers)


def has_epilogue_reader(program: Program, t: int) -> bool:
    """Whether step t is a product whose reader fuse_epilogues would fold into it."""
    return _fuse_one(list(program.steps), t, program) is not None


def can_move_up(p: Kernel, x: str, between) -> bool:
    """Whether step P, which reads the product's output x, can run where the product runs, across the steps
    `between` them: none of those writes what P reads besides x, writes P's output or reads it."""
    reads = set(p.reads()) - {x}
    return not any(s.output in reads or s.output == p.output or p.output in s.reads() for s in between)


def _product_readers(steps: list, t: int, program: Program) -> list[int] | None:
    """The steps that read (or update) step t's output, when step t is a floating product with no epilogue
    yet whose output is an intermediate: what an epilogue may be taken from."""
    m = steps[t]
    if not isinstance(m, MatmulKernel) or m.epilogue is not None or m.dtype not in FLOAT_PRODUCTS:
        return None
    x = m.output
    if program.buffers[x].kind != "arena":
        return None
    return [r for r in range(t + 1, len(steps)) if x in steps[r].reads() or steps[r].output == x]


def _fuse_one(steps: list, t: int, program: Program) -> tuple[int, MatmulKernel] | None:
    readers = _product_readers(steps, t, program)
    if readers is None or len(readers) != 1 or not isinstance(steps[readers[0]], PointwiseKernel):
        return None
    m, x = steps[t], steps[t].output
    r = readers[0]
    p = steps[r]
    if program.buffers[p.output].dtype not in FLOAT_PRODUCTS:
        return None
    index = _index_of(p.shape)
    own = [load for load in scalar.loads(p.value) if load.buffer == x]
    if any(load.indirect or sympy.expand(fold_div_mod(load.index) - index) != 0 for load in own):
        return None
    if not can_move_up(p, x, steps[t + 1:r]):
        return None
    indices = indices_from_product(p.shape, m)
    if indices is None:
        return None
    epilogue = scalar.substitute(p.value, indices, {load: product_value(m.dtype) for load in own})
    return r, replace(m, output=p.output, epilogue=_folded_indices(epilogue))


def _folded_indices(epilogue: scalar.Node) -> scalar.Node:
    """The epilogue's loads at the product's element folded: a [batch, seq, n] residual read at the row split
    back into (row // seq, row % seq) is read at row * n again, not through an int64 division and modulo per
    row (scripts/pdl_bench.py's `unfoldedidx` variant skips this)."""
    return scalar.map_indices(epilogue, fold_div_mod)


def _index_of(shape: tuple[sympy.Expr, ...]) -> sympy.Expr:
    """The contiguous offset of a pointwise kernel's element (i0, i1, ...) in its shape."""
    strides = contiguous_strides(shape)
    return sympy.expand(sum((index_var("i", d) * s for d, s in enumerate(strides)), sympy.Integer(0)))


def indices_from_product(shape: tuple[sympy.Expr, ...], m: MatmulKernel) -> dict[sympy.Symbol, sympy.Expr] | None:
    """P's index variables as expressions of the product's (e0, e1, e2), when P's shape splits into
    dimensions over the product's rows (batch x m, row-major) and dimensions over its columns (n)."""
    e0, e1, e2 = epilogue_vars()
    rows = sympy.expand(m.batch * m.m)
    for split in range(len(shape) + 1):
        if sympy.expand(product(shape[split:]) - m.n) == 0 and sympy.expand(product(shape[:split]) - rows) == 0:
            row = e0 * m.m + e1 if m.batch != 1 else e1
            out = unflatten(shape[:split], row, "i")
            out.update(unflatten(shape[split:], e2, "i", split))
            return out
    return None


# --- Epilogues the product's readers share -----------------------------------------------------------------
#
# A product may have several readers, or one that reads it out of order: GPT-2 computes q, k and v in one
# product and each of three pointwise kernels reads its third, adds its third of the bias and permutes it to
# [batch, heads, seq, dim]; BERT adds each projection's bias while permuting. None reads the product at its own
# element, so fuse_epilogues leaves them. When every reader computes the same function of the product's
# element and of loads indexed by the element's column (a bias), that function is the product's epilogue, in
# the product's own layout, and each reader becomes a plain copy of the result, which ir/copy_elision.py
# then turns into a view of it wherever its readers take views (attention's q, k and v do).
#
# The conditions for a product M writing the intermediate X, read by the pointwise steps P1..Pn:
# - each Pi reads X at one offset and the offset splits into a row and a column of the product:
#   row * n + col, with col proved within 0..n-1 over the declared ranges;
# - Pi's other loads read a constant offset, or the column plus a constant (the same bias column);
# - Pi computes nothing from its index itself (no index values), and all Pi give the same expression once
#   the product's element is the epilogue's `product_value` and the column is e2;
# - no step between M and the last Pi writes what that expression reads.


def fuse_shared_epilogues(program: Program) -> Program:
    steps = list(program.steps)
    buffers = dict(program.buffers)
    ranges = {s.expr: (s.min, s.max) for s in program.symbols}
    for t, step in enumerate(steps):
        fused = _shared_epilogue(steps, t, program, ranges)
        if fused is None:
            continue
        kernel, readers = fused
        steps[t] = kernel
        buffers[kernel.output] = replace(buffers[kernel.output], dtype=kernel.epilogue.dtype)
        for r, copy in readers.items():
            steps[r] = copy
    return replace(program, steps=tuple(steps), buffers=buffers)


def _shared_epilogue(steps: list, t: int, program: Program, ranges) -> tuple[MatmulKernel, dict] | None:
    readers = _product_readers(steps, t, program)
    if not readers or any(not isinstance(steps[r], PointwiseKernel) for r in readers):
        return None
    m, x = steps[t], steps[t].output
    forms = [_in_product_layout(steps[r], m, ranges) for r in readers]
    if any(f is None for f in forms) or len({epilogue for epilogue, _ in forms}) != 1:
        return None
    epilogue = forms[0][0]
    if epilogue == product_value(m.dtype) or epilogue.dtype not in FLOAT_PRODUCTS:
        return None  # the readers only move the product: nothing to compute in its epilogue
    reads = {load.buffer for load in scalar.loads(epilogue)} - {ACC}
    if any(s.output in reads for s in steps[t + 1:readers[-1]]):
        return None
    copies = {r: replace(steps[r], value=Load(x, offset, epilogue.dtype)) for r, (_, offset) in zip(readers, forms)}
    return replace(m, epilogue=epilogue), copies


def _in_product_layout(p: PointwiseKernel, m: MatmulKernel, ranges) -> tuple[scalar.Node, sympy.Expr] | None:
    """(P's value as an epilogue of M, the offset at which P reads M's product) when P computes its element
    from the product's element and loads at that element's column only."""
    if any(isinstance(n, scalar.IndexValue) and n.expr.free_symbols & _index_vars(p.shape) for n in _nodes(p.value)):
        return None
    own = [load for load in scalar.loads(p.value) if load.buffer == m.output]
    if len({load.index for load in own}) != 1 or own[0].indirect:
        return None
    offset = fold_div_mod(own[0].index)
    column = column_of(offset, m.n, extent_bounds({index_var("i", d): e for d, e in enumerate(p.shape)}, ranges))
    if column is None:
        return None
    _, _, e2 = epilogue_vars()
    replaced: dict[Load, scalar.Node] = {load: product_value(m.dtype) for load in own}
    for load in scalar.loads(p.value):
        if load.buffer == m.output:
            continue
        if load.indirect:
            return None
        rest = sympy.expand(fold_div_mod(load.index) - column)
        if not rest.free_symbols & _index_vars(p.shape):
            replaced[load] = Load(load.buffer, sympy.expand(e2 + rest), load.dtype)
        elif load.index.free_symbols & _index_vars(p.shape):
            return None  # varies with P's element other than along the product's column
    return scalar.substitute(p.value, {}, replaced), own[0].index


def _index_vars(shape) -> set[sympy.Symbol]:
    return {index_var("i", d) for d in range(len(shape))}


def _nodes(node: scalar.Node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, scalar.Op):
            stack.extend(n.args)
        elif isinstance(n, Load):
            stack.extend(i.value for i in n.indirect)
