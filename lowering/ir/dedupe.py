"""Identical kernels computed once: a step that recomputes what an earlier step already wrote is dropped and
its readers read the earlier step's buffer.

Decompositions repeat work the frontend cannot see as one value: layer norm, decomposed, sums each row once
for the mean in the variance and again for the mean it subtracts, two identical reduction kernels. A step is
a duplicate of an earlier one when the two are equal but for their output buffer (same family, shape, reads
and expression), neither output is a program output, nothing between them writes what they read, and the
earlier output is not overwritten in between; each of the two buffers is written by its own step only (no
scatter updates either).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import fields, replace

from . import scalar
from .kernels import (
    AttentionKernel,
    GatheredOperand,
    Kernel,
    MatmulKernel,
    PointwiseKernel,
    Program,
    ReductionKernel,
    RowKernel,
    ScatterKernel,
    StridedView,
)

PURE = (PointwiseKernel, ReductionKernel, RowKernel)  # kernels that compute a new buffer from their reads alone


def dedupe_kernels(program: Program) -> Program:
    steps = list(program.steps)
    buffers = dict(program.buffers)
    outputs = set(program.outputs)
    writers = Counter(s.output for s in steps)  # dropping a duplicate changes no other buffer's count
    t = 0
    while t < len(steps):
        later = _duplicate_of(steps, t, outputs, writers)
        if later is None:
            t += 1
            continue
        old, new = steps[later].output, steps[t].output
        del steps[later]
        steps[later:] = [rename_reads(s, old, new) for s in steps[later:]]
        del buffers[old]
    return replace(program, steps=tuple(steps), buffers=buffers)


def _key(kernel: Kernel) -> tuple:
    return (type(kernel),) + tuple(getattr(kernel, f.name) for f in fields(kernel) if f.name != "output")


def _duplicate_of(steps: list[Kernel], t: int, outputs: set[str], writers: Counter) -> int | None:
    first = steps[t]
    if not isinstance(first, PURE) or first.output in outputs:
        return None
    key, reads = _key(first), set(first.reads())
    for u in range(t + 1, len(steps)):
        step = steps[u]
        if isinstance(step, PURE) and step.output not in outputs and _key(step) == key:
            # each buffer written once, by its own step: a scatter updating either later would make them differ
            return u if writers[first.output] == 1 and writers[step.output] == 1 else None
        if step.output in reads or step.output == first.output:
            return None  # what they read, or the first's result, changes after here
    return None


def rename_reads(kernel: Kernel, old: str, new: str) -> Kernel:
    """The kernel reading buffer `new` wherever it read `old`."""
    def node(n):
        return scalar.rename_buffer(n, old, new) if n is not None else None

    def view(v):
        if isinstance(v, StridedView) and v.buffer == old:
            return replace(v, buffer=new)
        if isinstance(v, GatheredOperand):
            return GatheredOperand(node(v.value))
        return v  # a PanelView reads a weight: never a kernel's output

    if isinstance(kernel, (PointwiseKernel, ReductionKernel)):
        return replace(kernel, value=node(kernel.value))
    if isinstance(kernel, RowKernel):
        return replace(kernel, value=node(kernel.value),
                       reductions=tuple(replace(r, value=node(r.value)) for r in kernel.reductions))
    if isinstance(kernel, ScatterKernel):
        return replace(kernel, value=node(kernel.value), target=node(kernel.target))
    if isinstance(kernel, MatmulKernel):
        return replace(kernel, a=view(kernel.a), b=view(kernel.b), epilogue=node(kernel.epilogue))
    if isinstance(kernel, AttentionKernel):
        return replace(kernel, q=view(kernel.q), k=view(kernel.k), v=view(kernel.v), mask=node(kernel.mask))
    raise TypeError(f"rename_reads: unknown kernel {type(kernel).__name__}")
