"""Sibling pointwise steps stacked into one: two consecutive steps that compute the same expression over adjacent
slices of one dimension become one step over both slices, and their readers read their slice through a view.

A rotary embedding applies the same rotation to q and to k: two pointwise steps, [batch, heads, seq, dim] and
[batch, kv_heads, seq, dim], each reading its heads' columns of the one q|k|v product (ir/sibling_products.py) at
dim * head + column. Since k's columns follow q's, k's expression is q's with the head index shifted by q's head
count, so q's expression over heads + kv_heads computes both: one launch instead of two for every layer of a
rotary model (Llama, Mistral, Qwen, Phi-3, GPT-NeoX), 8 of the full-size Llama example's 74 steps.

Steps A (shape Sa) and B (shape Sb), consecutive, are stacked along dimension d when:
- both are pointwise, write arena intermediates of one dtype that no other step writes, and B does not read A's
  output (so B can run when A does);
- Sa and Sb agree but at d, and B's value is A's with i_d replaced by i_d + Sa[d] (every offset and index value
  compared after expansion), so A's expression over 0..Sa[d] + Sb[d] - 1 is A's values then B's;
- every reader of A and of B reads it in a way copy_elision's `retarget` composes with a view (attention's q, k
  and v; aligned pointwise and reduction loads), else both stay as they were.
The stacked step writes A's values then B's along d in one buffer of shape Sa with d's extent summed; A's readers
read it from offset 0 and B's from Sa[d] times d's stride. Pairs only: a third step continuing the pair would have
the pair's readers read the stacked buffer at an offset (B's heads), which `retarget` does not compose (q, k and v
each through one expression, say; tried in session 25).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import sympy

from . import scalar
from .copy_elision import retarget
from .kernels import Buffer, Kernel, PointwiseKernel, Program, StridedView
from .scalar import Node
from .symbolic import contiguous_strides, index_var


def stack_pointwise(program: Program) -> Program:
    t = 0
    while t + 1 < len(program.steps):
        program = _stacked(program, t) or program
        t += 1
    return program


def _stacked(program: Program, t: int) -> Program | None:
    a, b = program.steps[t], program.steps[t + 1]
    if not (isinstance(a, PointwiseKernel) and isinstance(b, PointwiseKernel)) or a.output in b.reads():
        return None
    writers = Counter(s.output for s in program.steps)
    buf_a, buf_b = program.buffers[a.output], program.buffers[b.output]
    if (buf_a.kind, buf_b.kind) != ("arena", "arena") or buf_a.dtype != buf_b.dtype or \
            writers[a.output] != 1 or writers[b.output] != 1:
        return None
    d = _stacking_dim(a, b)
    if d is None:
        return None
    shape = tuple(sympy.expand(ea + eb) if i == d else ea for i, (ea, eb) in enumerate(zip(a.shape, b.shape)))
    name = f"{a.output}.stacked"
    strides = contiguous_strides(shape)
    views = {a.output: (a.shape, StridedView(name, sympy.Integer(0), strides)),
             b.output: (b.shape, StridedView(name, sympy.expand(a.shape[d] * strides[d]), strides))}
    steps: list[Kernel] = [replace(a, output=name, shape=shape)]
    for step in program.steps[t + 2:]:
        for old, (old_shape, view) in views.items():
            if old in step.reads():
                step = retarget(step, old, old_shape, view)
                if step is None:
                    return None
        steps.append(step)
    buffers = {n: buf for n, buf in program.buffers.items() if n not in views}
    buffers[name] = Buffer(name, buf_a.dtype, shape, "arena")
    return replace(program, steps=(*program.steps[:t], *steps), buffers=buffers)


def _stacking_dim(a: PointwiseKernel, b: PointwiseKernel) -> int | None:
    """The dimension along which B's value is A's continued (see the module's docstring), else None."""
    if len(a.shape) != len(b.shape):
        return None
    differ = [i for i, (ea, eb) in enumerate(zip(a.shape, b.shape)) if sympy.expand(ea - eb) != 0]
    candidates = differ if differ else range(len(a.shape))
    for d in candidates:
        if any(sympy.expand(ea - eb) != 0 for i, (ea, eb) in enumerate(zip(a.shape, b.shape)) if i != d):
            continue
        var = index_var("i", d)
        shifted, value = scalar.substitute(a.value, {var: var + a.shape[d]}), b.value
        if b.shape[d] == 1:  # B's lowering wrote its index there as 0 (a dimension of one element)
            shifted, value = scalar.substitute(shifted, {var: 0}), scalar.substitute(value, {var: 0})
        if _expanded(shifted) == _expanded(value):
            return d
    return None


def _expanded(node: Node) -> Node:
    """The tree with every index expression expanded, so that equal expressions compare equal."""
    return scalar.map_exprs(node, lambda e: sympy.expand(sympy.sympify(e)))
