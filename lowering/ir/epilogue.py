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
from torch.utils._sympy import functions as tf

from . import scalar
from .kernels import MatmulKernel, PointwiseKernel, Program, epilogue_vars, product_value
from .symbolic import contiguous_strides, fold_div_mod, index_var, product

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


def _fuse_one(steps: list, t: int, program: Program) -> tuple[int, MatmulKernel] | None:
    m = steps[t]
    if not isinstance(m, MatmulKernel) or m.epilogue is not None or m.dtype not in FLOAT_PRODUCTS:
        return None
    x = m.output
    if program.buffers[x].kind != "arena":
        return None
    readers = [r for r in range(t + 1, len(steps)) if x in steps[r].reads() or steps[r].output == x]
    if len(readers) != 1 or not isinstance(steps[readers[0]], PointwiseKernel):
        return None
    r = readers[0]
    p = steps[r]
    if program.buffers[p.output].dtype not in FLOAT_PRODUCTS:
        return None
    index = _index_of(p.shape)
    own = [load for load in scalar.loads(p.value) if load.buffer == x]
    if any(load.indirect or sympy.expand(fold_div_mod(load.index) - index) != 0 for load in own):
        return None
    between = steps[t + 1:r]
    reads = set(p.reads()) - {x}
    if any(s.output in reads or s.output == p.output or p.output in s.reads() for s in between):
        return None
    indices = _indices_from_product(p.shape, m)
    if indices is None:
        return None
    epilogue = scalar.substitute(p.value, indices, {load: product_value(m.dtype) for load in own})
    return r, replace(m, output=p.output, epilogue=epilogue)


def _index_of(shape: tuple[sympy.Expr, ...]) -> sympy.Expr:
    """The contiguous offset of a pointwise kernel's element (i0, i1, ...) in its shape."""
    strides = contiguous_strides(shape)
    return sympy.expand(sum((index_var("i", d) * s for d, s in enumerate(strides)), sympy.Integer(0)))


def _indices_from_product(shape: tuple[sympy.Expr, ...], m: MatmulKernel) -> dict[sympy.Symbol, sympy.Expr] | None:
    """P's index variables as expressions of the product's (e0, e1, e2), when P's shape splits into
    dimensions over the product's rows (batch x m, row-major) and dimensions over its columns (n)."""
    e0, e1, e2 = epilogue_vars()
    rows = sympy.expand(m.batch * m.m)
    for split in range(len(shape) + 1):
        if sympy.expand(product(shape[split:]) - m.n) == 0 and sympy.expand(product(shape[:split]) - rows) == 0:
            row = e0 * m.m + e1 if m.batch != 1 else e1
            out = _decompose(shape[:split], row, 0)
            out.update(_decompose(shape[split:], e2, split))
            return out
    return None


def _decompose(shape: tuple[sympy.Expr, ...], flat: sympy.Expr, first: int) -> dict[sympy.Symbol, sympy.Expr]:
    """The index of each dimension of `shape` (variables i<first>, ...) from a row-major flat index."""
    out = {}
    strides = contiguous_strides(shape)
    for d, (size, stride) in enumerate(zip(shape, strides)):
        var = index_var("i", first + d)
        if size == 1:
            out[var] = sympy.Integer(0)
            continue
        if d == 0:  # the outermost dimension needs no wrap-around
            out[var] = flat if stride == 1 else tf.FloorDiv(flat, stride)
        else:
            out[var] = tf.ModularIndexing(flat, stride, size)
    return out
