"""Row kernels as matrix-product prologues: a norm computed by the product that reads it.

A pre-norm transformer (GPT-2, Llama) normalises the residual stream right before each product that reads
it: a row kernel (ir/row_fusion.py: layer norm, RMS norm) writes the normalised rows, and the next product
reads them once as its a operand. At short sequences each of those row kernels is a launch and a few
microseconds of a nearly idle GPU (GPT-2: 25 of 86 kernels, at one token), so the row kernel moves into the
product: the product computes its rows' reductions before its k loop (MatmulKernel.a_reductions) and evaluates
the row kernel's pointwise value for each tile of a as it loads it (a GatheredOperand), so the normalised
rows never exist in memory. Every backend does it, from this one rule.

A row kernel R moves into the matrix products after it that read it when, for every reader M:
- R's output X is an intermediate written once and read by matrix products alone (Llama's MLP: the gate's
  and the up projection's), each reading it as its a operand only, a strided view that is R's own row-major
  layout: a[b, m, k] is X's element (row b*M + m, element k), so R's rows are M's batch x rows and its
  reduced extent is M's k;
- M is a floating product (the float templates read gathered operands);
- no step between R and M writes what R reads (R moves down to M).
Each reader computes R itself. Its a is R's pointwise value cast to X's dtype, as X was stored, with R's
reductions rounded to their stored dtypes as R rounded them. The C++ kernel folds each row as the row kernel
did (the same lanes), so its results are bit-identical; a Triton program folds its rows BK elements at a time
where the row kernel folded a row whole, so they match within rounding.

What it costs: each program of each reader recomputes its rows' reductions (one pass over its rows of a for
each reduction, from cache), where the row kernel computed them once per row; against a launch and a pass
over memory saved. A program's rows are BM x K elements, what its k loop reads anyway.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import sympy

from . import scalar
from .kernels import (
    GatheredOperand,
    MatmulKernel,
    Program,
    RowKernel,
    RowReduction,
    StridedView,
    operand_buffers,
    operand_vars,
)
from .symbolic import fold_div_mod, product, unflatten

FLOAT_PRODUCTS = ("float32", "float16", "bfloat16")


def fuse_row_prologues(program: Program) -> Program:
    steps = list(program.steps)
    buffers = dict(program.buffers)
    t = 0
    while t < len(steps):
        fused = _fuse_one(steps, t, program)
        if fused is None:
            t += 1
            continue
        for reader, kernel in fused.items():
            steps[reader] = kernel
        del buffers[steps[t].output]
        del steps[t]
    return replace(program, steps=tuple(steps), buffers=buffers)


def _fuse_one(steps: list, t: int, program: Program) -> dict[int, MatmulKernel] | None:
    """The products that take in row kernel t, by position, if every reader of its output is such a product."""
    row = steps[t]
    if not isinstance(row, RowKernel):
        return None
    out = row.output
    if program.buffers[out].kind != "arena" or out in program.outputs or Counter(s.output for s in steps)[out] != 1:
        return None
    readers = [u for u in range(t + 1, len(steps)) if out in steps[u].reads()]
    reads = set(row.reads())
    fused: dict[int, MatmulKernel] = {}
    for p in readers:
        mm = steps[p]
        if not isinstance(mm, MatmulKernel) or mm.a_reductions or mm.dtype not in FLOAT_PRODUCTS:
            return None
        if not isinstance(mm.a, StridedView) or mm.a.buffer != out or out in _other_reads(mm):
            return None
        if not _row_major(mm, row) or any(steps[s].output in reads for s in range(t + 1, p)):
            return None
        fused[p] = _with_row_prologue(mm, row, program.buffers[out].dtype)
    return fused or None


def _with_row_prologue(mm: MatmulKernel, row: RowKernel, stored: str) -> MatmulKernel:
    """The product with the row kernel's reductions before its k loop and its value as a."""
    # the row kernel's index variables as expressions of the operand's: row b*M + m of its rows, element k
    g0, g1, g2 = operand_vars()
    flat_row = g0 * mm.m + g1 if sympy.expand(mm.batch - 1) != 0 else g1
    indices = {**unflatten(row.rows, flat_row, "i"), **unflatten(row.reduced, g2, "r")}

    def moved(node: scalar.Node) -> scalar.Node:
        return scalar.map_indices(scalar.substitute(node, indices), fold_div_mod)

    a_reductions = tuple(RowReduction(r.name, moved(r.value), r.op, r.acc_dtype, r.out_dtype) for r in row.reductions)
    return replace(mm, a=GatheredOperand(scalar.cast(moved(row.value), stored)), a_reductions=a_reductions)


def _other_reads(mm: MatmulKernel) -> set[str]:
    """What the product reads besides a: b and its epilogue's loads."""
    epilogue = [load.buffer for load in scalar.loads(mm.epilogue)] if mm.epilogue is not None else []
    return {*operand_buffers(mm.b), *epilogue}


def _row_major(mm: MatmulKernel, row: RowKernel) -> bool:
    """Whether a[b, m, k] is element k of row b*M + m of the row kernel's contiguous output."""
    view = mm.a
    k_total = product(row.reduced)
    same = [
        (product(row.rows), mm.batch * mm.m), (k_total, mm.k), (view.offset, 0), (view.strides[2], 1),
        (view.strides[1], k_total),
    ]
    if sympy.expand(mm.batch - 1) != 0:
        same.append((view.strides[0], mm.m * k_total))
    return all(sympy.expand(sympy.sympify(x) - y) == 0 for x, y in same)
