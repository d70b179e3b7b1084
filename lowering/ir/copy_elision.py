"""Copies read as views: a pointwise step that only moves elements of a buffer (a permute, a slice) is dropped
and its readers read the source buffer through a strided view instead.

The frontend already keeps lazy permutes as views (frontend/values.py `affine_view`); copies remain where a
value was computed and stored first and permuted after. ir/epilogue.py `fuse_shared_epilogues` makes such
copies on purpose: GPT-2's q, k and v, each a third of one product with its bias added in the product's
epilogue, then permuted to [batch, heads, seq, dim] for attention, which takes strided views. Dropping the
copy saves a launch and a pass over memory per copy.

A step C writing X is a copy when its value is one plain load (no indirection, no cast) of a buffer Y at an
offset affine in C's index: X[i] = Y[base + sum(i_d * s_d)]. It is dropped when:
- X is an intermediate written only by C, and Y is written by one step only (so it cannot change later);
- every reader of X reads it in a way that composes with the copy: attention's q, k, v and a pointwise or
  reduction load that address X through its own dimensions in order ("aligned": each term of the reader's
  offset is one reader index times X's contiguous stride of one dimension, over that dimension's extent);
  X's readers then read Y at base + sum(i_d * s_d) with i_d the reader's index for dimension d.
Anything else keeps the copy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import sympy

from . import scalar
from .kernels import AttentionKernel, Kernel, PointwiseKernel, Program, ReductionKernel, StridedView
from .scalar import Load
from .symbolic import affine_parts, contiguous_strides, fold_div_mod, index_var


def elide_copies(program: Program) -> Program:
    steps = list(program.steps)
    buffers = dict(program.buffers)
    writers = Counter(s.output for s in steps)
    t = 0
    while t < len(steps):
        done = _elide(steps, t, program, writers)
        if done is None:
            t += 1
            continue
        del buffers[steps[t].output]
        del steps[t]
    return replace(program, steps=tuple(steps), buffers=buffers)


def _elide(steps: list[Kernel], t: int, program: Program, writers: Counter) -> bool | None:
    copy = steps[t]
    if not isinstance(copy, PointwiseKernel):
        return None
    x = copy.output
    view = _as_view(copy, program.buffers[x].dtype)
    if view is None or program.buffers[x].kind != "arena" or writers[x] != 1 or writers[view.buffer] != 1:
        return None
    readers = [r for r in range(t + 1, len(steps)) if x in steps[r].reads()]
    retargeted = [retarget(steps[r], x, copy.shape, view) for r in readers]
    if not readers or any(k is None for k in retargeted):
        return None
    for r, kernel in zip(readers, retargeted):
        steps[r] = kernel
    return True


def _as_view(copy: PointwiseKernel, dtype: str) -> StridedView | None:
    """The strided view of its source that a copy's value is (stored as read: `dtype`), else None."""
    node = copy.value
    if not isinstance(node, Load) or node.indirect or node.dtype != dtype:
        return None
    parts = affine_parts(fold_div_mod(node.index), [index_var("i", d) for d in range(len(copy.shape))])
    return StridedView(node.buffer, *parts) if parts is not None else None


def _aligned(offset: sympy.Expr, variables: dict[sympy.Symbol, sympy.Expr], shape) -> dict[int, sympy.Expr] | None:
    """For an offset into a contiguous buffer of `shape`, read with index variables of the given extents: each
    dimension's index, when every term is one variable times one dimension's stride over that dimension's
    extent (no constant, at most one variable per dimension); else None."""
    strides = contiguous_strides(shape)
    out: dict[int, sympy.Expr] = {}
    for term in sympy.Add.make_args(sympy.expand(fold_div_mod(offset))):
        if term == 0:
            continue
        used = [v for v in variables if v in term.free_symbols]
        if len(used) != 1:
            return None
        var = used[0]
        dims = [d for d, s in enumerate(strides) if sympy.expand(term - var * s) == 0 and d not in out]
        # a dimension of size 1 has the stride of the next one: the variable belongs to the dimension whose
        # extent it runs over
        dims = [d for d in dims if sympy.expand(shape[d] - variables[var]) == 0]
        if len(dims) != 1:
            return None
        out[dims[0]] = var
    return out


def _composed(view: StridedView, dims: dict[int, sympy.Expr]) -> sympy.Expr:
    return sympy.expand(view.offset + sum((view.strides[d] * v for d, v in dims.items()), sympy.Integer(0)))


def retarget(kernel: Kernel, x: str, shape, view: StridedView) -> Kernel | None:
    """The reader reading the copy's source through `view` instead of the copy, or None."""
    if isinstance(kernel, AttentionKernel):
        if kernel.mask is not None and x in {load.buffer for load in scalar.loads(kernel.mask)}:
            return None
        extents = {"q": (kernel.batch, kernel.heads, kernel.q_len, kernel.head_dim),
                   "k": (kernel.batch, kernel.kv_heads, kernel.kv_len, kernel.head_dim),
                   "v": (kernel.batch, kernel.kv_heads, kernel.kv_len, kernel.value_dim)}
        changes = {}
        for name, dims_extent in extents.items():
            operand: StridedView = getattr(kernel, name)
            if operand.buffer != x:
                continue
            variables = {index_var("a", d): e for d, e in enumerate(dims_extent)}
            # an index over one element is 0: one kv head's k and v read with any stride for the head
            ones = {v: sympy.Integer(0) for v, e in variables.items() if e == 1}
            offset = sympy.sympify(operand.offset_at(list(variables))).xreplace(ones)
            dims = _aligned(offset, {v: e for v, e in variables.items() if v not in ones}, shape)
            if dims is None or len(dims) != sum(1 for s in shape if s != 1):
                return None
            parts = affine_parts(_composed(view, dims), list(variables))
            if parts is None:
                return None
            changes[name] = StridedView(view.buffer, *parts)
        return replace(kernel, **changes)
    if isinstance(kernel, (PointwiseKernel, ReductionKernel)):
        variables = {index_var("i", d): e for d, e in enumerate(kernel.shape)}
        if isinstance(kernel, ReductionKernel):
            variables.update({index_var("r", d): e for d, e in enumerate(kernel.reduced)})
        replaced = {}
        for load in scalar.loads(kernel.value):
            if load.buffer != x:
                continue
            dims = None if load.indirect else _aligned(load.index, variables, shape)
            if dims is None:
                return None
            replaced[load] = Load(view.buffer, _composed(view, dims), load.dtype)
        return replace(kernel, value=scalar.substitute(kernel.value, {}, replaced))
    return None
