"""Paired products: a product whose epilogue reads another product of the same operand, element for element,
computes both in one kernel.

A gated MLP (Llama's, Mistral's, Qwen's; Gemma's with GELU) computes act(x @ Wg) * (x @ Wu). After
ir/epilogue.py that is two kernels: the gate projection stores G, and the up projection's epilogue reads G at
its own element. Paired, the weights are interleaved column by column at export, b = [Wu[:, 0], Wg[:, 0],
Wu[:, 1], Wg[:, 1], ...], and one kernel computes the 2n-column product; its epilogue takes output column j
from columns 2j (`product_value`, the up projection's) and 2j + 1 (`paired_value`, the gate's), which lie in
the same tile. That is one launch instead of two, a wider grid at few rows (where each of the two kernels
alone is latency bound), and G is never stored or read back. ir/sibling_products.py cannot do this: merged
side by side, the two halves of a column pair fall in different tiles, and the product would need a
pointwise kernel after it.

Step P (a product with no epilogue, its output an intermediate that step U alone reads) pairs with step U (a
later product with an epilogue) when:
- both read the same strided `a` with batch 1, and have the same m, n, k and dtype;
- both b are weights of static layout and one dtype, read by no other step;
- U's epilogue reads P's output only at its own element, (e1, e2) of the [m, n] output;
- no step between P and U writes U's `a` (the pair reads it where U did), and P's output has no other writer.
The paired kernel takes U's place and writes U's output; P and its output are gone. Both products are rounded
to their dtype before the epilogue, as P's output was stored, so the pair computes what the two kernels did.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import sympy
import torch

from . import scalar
from .epilogue import FLOAT_PRODUCTS
from .kernels import Buffer, MatmulKernel, Program, StridedView, epilogue_vars, paired_value
from .symbolic import fold_div_mod


def pair_products(program: Program) -> Program:
    t = 0
    while t < len(program.steps):
        paired = _paired(program, t)
        program = paired or program
        t += 1
    return program


def _pairable(program: Program, step) -> bool:
    if not isinstance(step, MatmulKernel) or step.paired or step.batch != 1 or step.dtype not in FLOAT_PRODUCTS:
        return False
    if not isinstance(step.a, StridedView) or not isinstance(step.b, StridedView):
        return False
    static = all(sympy.sympify(e).is_Integer for e in (step.n, step.k, step.b.offset, *step.b.strides[1:]))
    return static and program.buffers[step.b.buffer].kind == "weight"


def _paired(program: Program, t: int) -> Program | None:
    steps = program.steps
    partner = steps[t]
    if not _pairable(program, partner) or partner.epilogue is not None:
        return None
    g = partner.output
    if program.buffers[g].kind != "arena" or Counter(s.output for s in steps)[g] != 1:
        return None
    readers = [u for u in range(t + 1, len(steps)) if g in steps[u].reads()]
    if len(readers) != 1:
        return None
    u = readers[0]
    own = steps[u]
    if not (_pairable(program, own) and own.epilogue is not None and own.a == partner.a
            and (own.m, own.n, own.k, own.dtype) == (partner.m, partner.n, partner.k, partner.dtype)):
        return None
    weights = (own.b.buffer, partner.b.buffer)
    if weights[0] == weights[1] or program.buffers[weights[0]].dtype != program.buffers[weights[1]].dtype:
        return None
    if any(set(s.reads()) & set(weights) for v, s in enumerate(steps) if v not in (t, u)):
        return None  # a weight read elsewhere too (tied): it would be stored twice
    if any(s.output == own.a.buffer for s in steps[t + 1:u]):
        return None
    epilogue = _with_partner(own, g)
    if epilogue is None:
        return None
    tensor = _interleaved(program, own, partner)
    k_major = all(int(p.b.strides[1]) == 1 for p in (own, partner))
    n2 = 2 * int(own.n)
    name = f"{weights[0]}.paired"
    source = "+".join(program.buffers[w].source for w in weights)
    buffers = {}  # the interleaved weight in the first one's place
    for key, buf in program.buffers.items():
        if key == weights[0]:
            buffers[name] = Buffer(name, buf.dtype, tuple(sympy.Integer(d) for d in tensor.shape), "weight", source)
        elif key not in (g, weights[1]):
            buffers[key] = buf
    b = StridedView(name, sympy.Integer(0), (sympy.Integer(0), sympy.Integer(1), sympy.Integer(int(own.k))) if k_major
                    else (sympy.Integer(0), sympy.Integer(n2), sympy.Integer(1)))
    kernel = replace(own, b=b, n=sympy.Integer(n2), epilogue=epilogue, paired=True)
    new_weights = {s: w for s, w in program.weights.items() if s not in {program.buffers[w].source for w in weights}}
    new_weights[source] = tensor
    new_steps = [*steps[:t], *steps[t + 1:u], kernel, *steps[u + 1:]]
    return replace(program, steps=tuple(new_steps), buffers=buffers, weights=new_weights)


def _with_partner(own: MatmulKernel, g: str):
    """U's epilogue with its loads of P's output (each at U's own element) as the paired value; None if it
    reads that output anywhere else."""
    e0, e1, e2 = epilogue_vars()
    element = sympy.expand(e1 * own.n + e2)  # batch 1: e0 is 0
    loads = [load for load in scalar.loads(own.epilogue) if load.buffer == g]
    if any(load.indirect or sympy.expand(fold_div_mod(load.index).subs(e0, 0) - element) != 0 for load in loads):
        return None
    return scalar.substitute(own.epilogue, {}, {load: paired_value(own.dtype) for load in loads})


def _interleaved(program: Program, own: MatmulKernel, partner: MatmulKernel) -> torch.Tensor:
    """Both b side by side, column by column ([k, 2n]: own's column j at 2j, the partner's at 2j + 1), stored
    k-contiguous ([2n, k], nn.Linear's layout) when both were, so the kernel reads it as it read them."""
    k, n = int(own.k), int(own.n)
    dense = [torch.as_strided(program.weights[program.buffers[p.b.buffer].source], (k, n),
                              (int(p.b.strides[1]), int(p.b.strides[2])), int(p.b.offset)) for p in (own, partner)]
    tensor = torch.stack(dense, dim=2).reshape(k, 2 * n)
    k_major = all(int(p.b.strides[1]) == 1 for p in (own, partner))
    return tensor.t().contiguous() if k_major else tensor.contiguous()
