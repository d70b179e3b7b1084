"""Paired products: two products of one operand that an elementwise consumer combines, element for element,
computed in one kernel.

A gated MLP computes act(x @ Wg) * (x @ Wu). Written with two projections (Llama's, Mistral's, Qwen's; Gemma's
with GELU), after ir/epilogue.py that is two kernels: the gate projection stores G, and the up projection's
epilogue reads G at its own element. Written with one projection cut in halves (Phi-3's gate_up_proj, the
GEGLU of diffusers' feed-forward: `h, g = proj(x).chunk(2, -1)`), it is a product and a pointwise kernel that
reads the product at column c and at column c + n. Paired, the weights are interleaved column by column at
export, b = [W1[:, 0], W2[:, 0], W1[:, 1], W2[:, 1], ...], and one kernel computes the 2n-column product; its
epilogue takes output column j from columns 2j (`product_value`) and 2j + 1 (`paired_value`), which lie in
the same tile. That is one launch instead of two, a wider grid at few rows (where each of the two kernels
alone is latency bound), and the intermediate is never stored or read back. ir/sibling_products.py cannot do
this: side by side, the two columns of a pair fall in different tiles.

Two rules make pairs; in both, every product is a floating one with batch 1 and a strided `a`, and each b is
a weight of static layout read by no other step:
- two products (own: the up projection, partner: the gate): the partner has no epilogue and its output, an
  intermediate written once, is read by own's epilogue alone, only at own's element; both read the same `a`
  and have the same m, n, k and dtype, and their weights one dtype; no step between them writes `a`. The pair
  takes own's place and writes own's output.
- one product's halves: its output, an intermediate written once, is read by one pointwise kernel alone,
  whose shape splits into the product's rows and n / 2 columns and which reads the product only at its own
  row and column c and column c + n / 2, both; no step between them writes what that kernel reads or touches
  its output. The product's own epilogue (an addmm's bias), if any, is applied to each half (at column c and
  at c + n / 2) before the pair's epilogue. The pair takes the product's place and writes the kernel's output.
Each product is rounded to the dtype its intermediate was stored in before the pair's epilogue reads it, so
the pair computes what the unpaired kernels did.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import sympy
import torch

from . import scalar
from .epilogue import FLOAT_PRODUCTS, can_move_up, indices_from_product
from .kernels import (
    Buffer,
    MatmulKernel,
    PointwiseKernel,
    Program,
    StridedView,
    epilogue_vars,
    paired_value,
    product_value,
)
from .symbolic import fold_div_mod


def pair_products(program: Program) -> Program:
    t = 0
    while t < len(program.steps):
        paired = _two_products(program, t) or _halves(program, t)
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


def _intermediate(program: Program, t: int) -> list[int] | None:
    """The steps that read step t's output, when that output is an intermediate that only step t writes."""
    x = program.steps[t].output
    if program.buffers[x].kind != "arena" or Counter(s.output for s in program.steps)[x] != 1:
        return None
    return [u for u in range(t + 1, len(program.steps)) if x in program.steps[u].reads()]


def _weights_alone(program: Program, weights: tuple[str, ...], steps: tuple[int, ...]) -> bool:
    """Whether no step but `steps` reads any of `weights` (a tied weight would be stored twice)."""
    return not any(set(s.reads()) & set(weights) for v, s in enumerate(program.steps) if v not in steps)


def _two_products(program: Program, t: int) -> Program | None:
    steps = program.steps
    partner = steps[t]
    if not _pairable(program, partner) or partner.epilogue is not None:
        return None
    readers = _intermediate(program, t)
    if readers is None or len(readers) != 1:
        return None
    u = readers[0]
    own = steps[u]
    if not (_pairable(program, own) and own.epilogue is not None and own.a == partner.a
            and (own.m, own.n, own.k, own.dtype) == (partner.m, partner.n, partner.k, partner.dtype)):
        return None
    weights = (own.b.buffer, partner.b.buffer)
    if weights[0] == weights[1] or program.buffers[weights[0]].dtype != program.buffers[weights[1]].dtype:
        return None
    if not _weights_alone(program, weights, (t, u)) or any(s.output == own.a.buffer for s in steps[t + 1:u]):
        return None
    epilogue = _with_partner(own, partner.output)
    if epilogue is None:
        return None
    dense = torch.cat([_dense(program, own), _dense(program, partner)], dim=1)
    kernel = replace(own, n=sympy.Integer(2 * int(own.n)), epilogue=epilogue, paired=True)
    new_steps = [*steps[:t], *steps[t + 1:u], kernel, *steps[u + 1:]]
    return _with_weight(program, new_steps, u - 1, weights, dense, _k_major(own) and _k_major(partner),
                        partner.output)


def _with_partner(own: MatmulKernel, g: str) -> scalar.Node | None:
    """own's epilogue with its loads of the partner's output (each at own's element) as the paired value; None
    if it reads that output anywhere else."""
    e0, e1, e2 = epilogue_vars()
    element = sympy.expand(e1 * own.n + e2)  # batch 1: e0 is 0
    loads = [load for load in scalar.loads(own.epilogue) if load.buffer == g]
    if any(load.indirect or sympy.expand(fold_div_mod(load.index).subs(e0, 0) - element) != 0 for load in loads):
        return None
    return scalar.substitute(own.epilogue, {}, {load: paired_value(own.dtype) for load in loads})


def _halves(program: Program, t: int) -> Program | None:
    steps = program.steps
    m = steps[t]
    if not _pairable(program, m) or int(m.n) % 2:
        return None
    readers = _intermediate(program, t)
    if readers is None or len(readers) != 1 or not isinstance(steps[readers[0]], PointwiseKernel):
        return None
    r = readers[0]
    p = steps[r]
    if program.buffers[p.output].dtype not in FLOAT_PRODUCTS or not _weights_alone(program, (m.b.buffer,), (t,)):
        return None
    if not can_move_up(p, m.output, steps[t + 1:r]):
        return None
    half = int(m.n) // 2
    indices = indices_from_product(p.shape, replace(m, n=sympy.Integer(half)))
    if indices is None:
        return None
    value = scalar.substitute(p.value, indices)  # the kernel's element as a function of (e0, e1, e2)
    e0, e1, e2 = epilogue_vars()
    own = m.epilogue if m.epilogue is not None else product_value(m.dtype)
    partner = scalar.substitute(own, {e2: e2 + half}, {product_value(m.dtype): paired_value(m.dtype)})
    halves = {sympy.expand(e1 * m.n + e2): own, sympy.expand(e1 * m.n + half + e2): partner}
    replaced, found = {}, set()
    for load in scalar.loads(value):
        if load.buffer != m.output:
            continue
        offset = None if load.indirect else sympy.expand(fold_div_mod(load.index).subs(e0, 0))
        if offset not in halves:
            return None
        found.add(offset)
        replaced[load] = scalar.cast(halves[offset], load.dtype)  # rounded as the product's output was stored
    if len(found) != 2:
        return None  # one half read only: nothing to pair
    kernel = replace(m, output=p.output, epilogue=scalar.substitute(value, {}, replaced), paired=True)
    new_steps = [*steps[:t], kernel, *steps[t + 1:r], *steps[r + 1:]]
    return _with_weight(program, new_steps, t, (m.b.buffer,), _dense(program, m), _k_major(m), m.output)


def _dense(program: Program, product: MatmulKernel) -> torch.Tensor:
    """The product's b as the dense [k, n] matrix it reads."""
    return torch.as_strided(program.weights[program.buffers[product.b.buffer].source],
                            (int(product.k), int(product.n)), (int(product.b.strides[1]), int(product.b.strides[2])),
                            int(product.b.offset))


def _k_major(product: MatmulKernel) -> bool:
    """Whether the product's b is stored k-contiguous ([n, k]: nn.Linear's weight, read transposed)."""
    return int(product.b.strides[1]) == 1


def _with_weight(program: Program, steps: list, at: int, weights: tuple[str, ...], dense: torch.Tensor,
                 k_major: bool, gone: str) -> Program:
    """The program with `steps`, step `at` (the pair) reading `dense` ([k, 2n]: the two products' columns side
    by side) interleaved column by column (column j of the first at 2j, of the second at 2j + 1) as its b, in
    place of `weights`; the intermediate `gone` dropped. The weight is stored k-contiguous ([2n, k]) when
    the products read theirs so (`k_major`), so the kernel reads it as it read them."""
    k, n = dense.shape[0], dense.shape[1] // 2
    tensor = torch.stack([dense[:, :n], dense[:, n:]], dim=2).reshape(k, 2 * n)
    tensor = tensor.t().contiguous() if k_major else tensor.contiguous()
    name = f"{weights[0]}.paired"
    # named apart from the weights it is made of (as *.panels16 are), so that refit without the model file
    # cannot take a tensor in the model's layout for it
    source = "+".join(program.buffers[w].source for w in weights) + ".paired"
    buffers = {}  # the interleaved weight in the first one's place
    for key, buf in program.buffers.items():
        if key == weights[0]:
            buffers[name] = Buffer(name, buf.dtype, tuple(sympy.Integer(d) for d in tensor.shape), "weight", source)
        elif key not in (gone, *weights[1:]):
            buffers[key] = buf
    one, zero = sympy.Integer(1), sympy.Integer(0)
    steps[at] = replace(steps[at], b=StridedView(name, zero, (zero, one, sympy.Integer(k)) if k_major
                                                 else (zero, sympy.Integer(2 * n), one)))
    new_weights = {s: w for s, w in program.weights.items() if s not in {program.buffers[w].source for w in weights}}
    new_weights[source] = tensor
    return replace(program, steps=tuple(steps), buffers=buffers, weights=new_weights)
