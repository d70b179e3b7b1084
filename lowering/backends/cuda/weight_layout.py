"""The CUDA layout pass: a weight that matrix products read as b stored [K, N] is stored [N, K] at export.

nn.Linear stores its weight [N, K] (out, in) and reads it transposed, so each column of b is one run of K
contiguous elements; GPT-2's Conv1D stores [K, N], so a column is K elements N apart. Under programmatic
dependent launch a few-row product fetches its columns of b into L2 before it waits for its predecessor
(render.py `_weight_prefetch`, one fetch per 128-byte line of a column): the Llama shape's products gained
4-6% at 1 and 16 tokens from it, while for [K, N] storage a 32-column tile's slab is 64 bytes of each of K
rows, a fetch per row, which measured slower than none (docs/performance.md), so GPT-2's products fetched
nothing. Stored [N, K], every product's b reads as nn.Linear's does, with the fetch, and TMA reads it as it
reads nn.Linear's (render.py `tma_operands`). Measured on the H200 (session 22): GPT-2 10% faster at 1 and 16
tokens, level from 128 up (docs/performance.md).

Only a weight that is read by nothing but matrix products, each reading all of it as its b ([K, N] at offset
0, row stride N), is stored transposed; a weight another kernel reads too (a tied embedding, gathered by the
embedding and read by the logits product) stays as it is, so that the package keeps one copy. The tensor is
named `<source>.transposed`: a different tensor from the model's parameter, which refit without the model
file refuses (as it does *.panels16 and *.paired), and refit with it lays out again.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import sympy

from ...ir.kernels import Buffer, MatmulKernel, Program, StridedView, operand_buffers

SUFFIX = ".transposed"


def _reads_kn(program: Program, step: object, name: str) -> bool:
    """Whether `step` is a product reading all of weight `name` as its b, stored [K, N]."""
    if not (isinstance(step, MatmulKernel) and isinstance(step.b, StridedView) and step.b.buffer == name):
        return False
    shape = program.buffers[name].shape
    if len(shape) != 2 or not all(getattr(d, "is_Integer", False) for d in shape):
        return False
    k, n = (int(d) for d in shape)
    b = step.b
    return (sympy.sympify(step.k) == k and sympy.sympify(step.n) == n and sympy.sympify(b.offset) == 0
            and sympy.sympify(b.strides[1]) == n and sympy.sympify(b.strides[2]) == 1
            and (sympy.sympify(b.strides[0]) == 0 or sympy.sympify(step.batch) == 1) and n > 1)


def transpose_kn_weights(program: Program) -> Program:
    """Every weight read only by products as their whole [K, N] b, stored [N, K] instead."""
    readers: dict[str, list[int]] = {}
    for t, step in enumerate(program.steps):
        for name in step.reads():
            readers.setdefault(name, []).append(t)
    sources = Counter(buf.source for buf in program.buffers.values() if buf.kind == "weight")
    chosen = [name for name, buf in program.buffers.items()
              if buf.kind == "weight" and name in readers and sources[buf.source] == 1
              and all(_reads_kn(program, program.steps[t], name) and name not in _read_besides_b(program.steps[t])
                      for t in readers[name])]
    if not chosen:
        return program
    buffers, weights, renamed = {}, dict(program.weights), {}
    for name, buf in program.buffers.items():  # each in its place: buffer ids keep their order
        if name not in chosen:
            buffers[name] = buf
            continue
        k, n = (int(d) for d in buf.shape)
        source = buf.source + SUFFIX
        weights[source] = weights.pop(buf.source).t().contiguous()
        renamed[name] = name + SUFFIX
        buffers[renamed[name]] = Buffer(renamed[name], buf.dtype, (sympy.Integer(n), sympy.Integer(k)), "weight", source)
    steps = []
    for step in program.steps:
        if isinstance(step, MatmulKernel) and isinstance(step.b, StridedView) and step.b.buffer in renamed:
            k = int(program.buffers[step.b.buffer].shape[0])
            step = dataclasses.replace(step, b=StridedView(renamed[step.b.buffer], sympy.Integer(0),
                                                           (step.b.strides[0], sympy.Integer(1), sympy.Integer(k))))
        steps.append(step)
    return dataclasses.replace(program, buffers=buffers, steps=tuple(steps), weights=weights)


def _read_besides_b(step: MatmulKernel) -> set[str]:
    """What a product reads as its a or in its epilogue: a weight read there too stays as it is."""
    return {*operand_buffers(step.a), *step.epilogue_reads()}
