"""Sibling products in one kernel: consecutive matrix products of one left operand with constant weights
become one product with the weights side by side, whose readers read their columns of it.

Llama computes q, k and v as three products of the same normalised rows; at short sequences each is a
small, latency-bound kernel, and one product three times as wide runs in about the time of one of them
(and fills more of the GPU). The weights are concatenated at export, so nothing is copied at run time.

Products P1..Pk (consecutive steps) are merged when they read the same strided `a`, have batch 1, no
epilogue yet (this runs before ir/epilogue.py), one dtype and depth k, and each `b` is a weight of static
layout that no other step reads. The merged product writes Y = [rows, n1 + ... + nk]; Pi's output Xi is
column block i of Y, and every read of Xi is rewritten to read Y: an offset row * ni + column (the column
proved within 0..ni-1 over the reader's index extents, symbolic.column_of) becomes row * N + (start of
block i) + column. A reader whose offsets cannot be proved so keeps the products apart.

Biases go the same way: when each product's readers add a bias by column (BERT's q, k and v, each added
while permuting to heads), the biases are concatenated too, each reader reads its block of them, and
ir/epilogue.py then adds the one merged bias in the merged product's epilogue. Products that would take an
epilogue of their own are left apart, since merged their readers would be kernels again: Llama's up
projection, whose epilogue multiplies it by the activated gate (merged with the gate, the two would need a
pointwise kernel over both), or products of which only some have a bias.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import sympy
import torch

from . import scalar
from .epilogue import has_epilogue_reader
from .kernels import (
    AttentionKernel,
    Buffer,
    GatheredOperand,
    Kernel,
    MatmulKernel,
    PointwiseKernel,
    Program,
    ReductionKernel,
    StridedView,
    epilogue_vars,
    operand_vars,
)
from .scalar import Load
from .symbolic import affine_parts, column_of, extent_bounds, index_var


def merge_sibling_products(program: Program) -> Program:
    ranges = {s.expr: (s.min, s.max) for s in program.symbols}
    t = 0
    while t < len(program.steps):  # a merge shortens the program: the next group starts right after it
        group = _group_at(program, t)
        merged = _merged(program, group, ranges) if len(group) > 1 else None
        program = merged or program
        t += 1
    return program


def _group_at(program: Program, t: int) -> list[int]:
    """The steps from t on that are sibling products of step t's, as long as they follow one another."""
    first = program.steps[t]
    if not _mergeable(program, first):
        return []
    group = [t]
    for u in range(t + 1, len(program.steps)):
        step = program.steps[u]
        if not (_mergeable(program, step) and step.a == first.a and step.m == first.m and step.k == first.k
                and step.dtype == first.dtype
                and program.buffers[step.b.buffer].dtype == program.buffers[first.b.buffer].dtype):
            break
        group.append(u)
    return group


def _mergeable(program: Program, step: Kernel) -> bool:
    if not isinstance(step, MatmulKernel) or step.epilogue is not None or step.batch != 1:
        return False
    if not isinstance(step.a, StridedView) or not isinstance(step.b, StridedView):
        return False
    weight = program.buffers[step.b.buffer]
    static = all(sympy.sympify(e).is_Integer for e in (step.n, step.k, step.b.offset, *step.b.strides[1:]))
    return weight.kind == "weight" and static and program.buffers[step.output].kind == "arena"


def _merged(program: Program, group: list[int], ranges) -> Program | None:
    if any(has_epilogue_reader(program, u) for u in group):
        return None  # its reader fuses into it as an epilogue: merged, that reader would be a kernel again
    products = [program.steps[u] for u in group]
    weights = [p.b.buffer for p in products]
    outputs = [p.output for p in products]
    if len(set(weights)) != len(weights) or len(set(outputs)) != len(outputs):
        return None
    others = [s for u, s in enumerate(program.steps) if u not in group]
    if any(set(s.reads()) & set(weights) for s in others):
        return None  # a weight read elsewhere too (tied): it would be stored twice
    if any(program.steps[u].output in s.reads() for u in range(group[0], group[-1]) for s in products):
        return None
    writers = Counter(s.output for s in program.steps)
    if any(writers[x] != 1 for x in outputs):
        return None
    n_total = sum(int(p.n) for p in products)
    starts = dict(zip(outputs, [sum(int(p.n) for p in products[:i]) for i in range(len(products))]))
    widths = {p.output: int(p.n) for p in products}
    merged_name = outputs[0]
    later = program.steps[group[-1] + 1:]
    biases = _biases(program, later, outputs, widths, ranges)
    if biases is None:
        return None
    rewritten = []
    for step in later:
        new = step
        for x in outputs:
            if x in new.reads():
                new = _reread(new, x, widths[x], merged_name, starts[x], n_total, ranges)
                if new is None:
                    return None
                if biases:
                    new = _moved_loads(new, biases[x], biases[outputs[0]] + ".siblings", starts[x])
        rewritten.append(new)
    k = int(products[0].k)
    # Each weight as the dense [k, n] b it is read as, side by side; stored k-contiguous (the layout of
    # nn.Linear's weight, [n, k]) when the originals were, so the kernel reads the merged weight as it read them.
    dense = [torch.as_strided(program.weights[program.buffers[p.b.buffer].source], (k, int(p.n)),
                              (int(p.b.strides[1]), int(p.b.strides[2])), int(p.b.offset)) for p in products]
    k_major = all(int(p.b.strides[1]) == 1 for p in products)
    tensor = torch.cat(dense, dim=1)
    tensor = tensor.t().contiguous() if k_major else tensor.contiguous()
    source = "+".join(program.buffers[w].source for w in weights)
    weight_name = f"{weights[0]}.siblings"
    b = StridedView(weight_name, sympy.Integer(0), (sympy.Integer(0), sympy.Integer(1), sympy.Integer(k)) if k_major
                    else (sympy.Integer(0), sympy.Integer(n_total), sympy.Integer(1)))
    product = replace(products[0], b=b, n=sympy.Integer(n_total))
    buffers = {}
    for name, buf in program.buffers.items():
        if name in weights[1:] or name in outputs[1:]:
            continue
        if name == weights[0]:
            buffers[weight_name] = Buffer(weight_name, buf.dtype, tuple(sympy.Integer(d) for d in tensor.shape),
                                          "weight", source)
            continue
        buffers[name] = replace(buf, shape=(products[0].m, sympy.Integer(n_total))) if name == merged_name else buf
    new_weights = {name: w for name, w in program.weights.items()
                   if name not in {program.buffers[w].source for w in weights}}
    new_weights[source] = tensor
    if biases:
        buffers, new_weights = _concatenated_biases(program, buffers, new_weights, [biases[x] for x in outputs])
    steps = [*program.steps[:group[0]], product, *rewritten]
    return replace(program, steps=tuple(steps), buffers=buffers, weights=new_weights)


def _biases(program: Program, later: list[Kernel], outputs: list[str], widths: dict[str, int],
            ranges) -> dict[str, str] | None:
    """Each product's bias, when its readers add one: {} when none does; None when they cannot be concatenated
    beside one another as the weights are (each a 1-D weight of its product's width, read by those readers only,
    one per product, all or none of the products having one)."""
    found: dict[str, set[str]] = {x: set() for x in outputs}
    for step in later:
        for x in outputs:
            if x in step.reads():
                found[x] |= _column_weights(step, x, widths[x], program, ranges)
    if not any(found.values()):
        return {}
    if any(len(b) != 1 for b in found.values()):
        return None
    biases = {x: next(iter(b)) for x, b in found.items()}
    names = list(biases.values())
    if len(set(names)) != len(names) or len({program.buffers[b].dtype for b in names}) != 1:
        return None
    for x, b in biases.items():
        shape = program.buffers[b].shape
        if len(shape) != 1 or shape[0] != widths[x]:
            return None
    if any(set(step.reads()) & set(names) and not set(step.reads()) & set(outputs) for step in program.steps):
        return None  # a bias read by a step that reads no product: it would be stored twice
    return biases


def _column_weights(kernel: Kernel, x: str, width: int, program: Program, ranges) -> set[str]:
    """The weights a pointwise reader of x reads at x's column (the biases ir/epilogue.py would fuse): vectors as
    wide as x. A narrower weight read at the same index is no bias: with one kv head, a rotary embedding reads its
    inverse frequencies (head_dim / 2 of them) at the index it reads k's rotated half at."""
    if not isinstance(kernel, PointwiseKernel):
        return set()
    bounds = extent_bounds({index_var("i", d): e for d, e in enumerate(kernel.shape)}, ranges)
    loads = scalar.loads(kernel.value)
    columns = {column_of(load.index, width, bounds) for load in loads if load.buffer == x}
    return {load.buffer for load in loads if load.buffer != x and program.buffers[load.buffer].kind == "weight"
            and tuple(program.buffers[load.buffer].shape) == (width,)
            and any(c is not None and not (load.index - c).free_symbols for c in columns)}


def _moved_loads(kernel: Kernel, old: str, new: str, start: int) -> Kernel:
    """A pointwise reader loading `old`[h] as `new`[start + h] (old is `new`'s block at `start`)."""
    if not isinstance(kernel, PointwiseKernel):
        return kernel
    moved = {load: Load(new, sympy.expand(load.index + start), load.dtype)
             for load in scalar.loads(kernel.value) if load.buffer == old and not load.indirect}
    return replace(kernel, value=scalar.substitute(kernel.value, {}, moved)) if moved else kernel


def _concatenated_biases(program: Program, buffers: dict, weights: dict, biases: list[str]) -> tuple[dict, dict]:
    """The biases as one weight, in the products' order, in the first one's place."""
    sources = [program.buffers[b].source for b in biases]
    tensor = torch.cat([program.weights[s].reshape(-1) for s in sources]).contiguous()
    name, source = biases[0] + ".siblings", "+".join(sources)
    out = {}
    for key, buf in buffers.items():
        if key in biases[1:]:
            continue
        out[name if key == biases[0] else key] = (
            Buffer(name, buf.dtype, (sympy.Integer(tensor.numel()),), "weight", source) if key == biases[0] else buf)
    weights = {k: w for k, w in weights.items() if k not in sources}
    weights[source] = tensor
    return out, weights


def _variables(kernel: Kernel) -> list[tuple[object, dict[sympy.Symbol, sympy.Expr]]]:
    """Each expression tree of the kernel with the extents of its index variables."""
    if isinstance(kernel, PointwiseKernel):
        return [("value", {index_var("i", d): e for d, e in enumerate(kernel.shape)})]
    if isinstance(kernel, ReductionKernel):
        extents = {index_var("i", d): e for d, e in enumerate(kernel.shape)}
        extents.update({index_var("r", d): e for d, e in enumerate(kernel.reduced)})
        return [("value", extents)]
    if isinstance(kernel, MatmulKernel):
        e0, e1, e2 = epilogue_vars()
        g0, g1, g2 = operand_vars()
        return [("epilogue", {e0: kernel.batch, e1: kernel.m, e2: kernel.out_columns}),
                ("a", {g0: kernel.batch, g1: kernel.m, g2: kernel.k}),
                ("b", {g0: kernel.batch, g1: kernel.k, g2: kernel.n})]
    if isinstance(kernel, AttentionKernel):
        return [("mask", {index_var("i", d): e for d, e in
                          enumerate((kernel.batch, kernel.heads, kernel.q_len, kernel.kv_len))}),
                ("q", (kernel.batch, kernel.heads, kernel.q_len, kernel.head_dim)),
                ("k", (kernel.batch, kernel.kv_heads, kernel.kv_len, kernel.head_dim)),
                ("v", (kernel.batch, kernel.kv_heads, kernel.kv_len, kernel.value_dim))]
    return []


def _moved(index: sympy.Expr, width: int, start: int, total: int, bounds) -> sympy.Expr | None:
    """An offset into x = [rows, width] as the offset of the same element in [rows, total] at column start."""
    column = column_of(index, width, bounds)
    if column is None:
        return None
    row_part = sympy.expand(index - column)
    return sympy.expand(row_part / width * total + start + column)


def _reread(kernel: Kernel, x: str, width: int, y: str, start: int, total: int, ranges) -> Kernel | None:
    """The kernel reading x's elements from y (x being column block `start` of y), or None if not proved."""
    changes = {}
    for field_name, extents in _variables(kernel):
        part = getattr(kernel, field_name)
        if part is None:
            continue
        if isinstance(part, StridedView):
            if part.buffer != x:
                continue
            variables = {index_var("a", d): e for d, e in enumerate(extents)}
            moved = _moved(part.offset_at(list(variables)), width, start, total, extent_bounds(variables, ranges))
            parts = affine_parts(moved, list(variables)) if moved is not None else None
            if parts is None:
                return None
            changes[field_name] = StridedView(y, *parts)
            continue
        node = part.value if isinstance(part, GatheredOperand) else part
        if not hasattr(node, "dtype"):
            continue  # a PanelView: reads a weight
        bounds = extent_bounds(extents, ranges)
        replaced = {}
        for load in scalar.loads(node):
            if load.buffer != x:
                continue
            moved = None if load.indirect else _moved(load.index, width, start, total, bounds)
            if moved is None:
                return None
            replaced[load] = Load(y, moved, load.dtype)
        if replaced:
            node = scalar.substitute(node, {}, replaced)
            changes[field_name] = GatheredOperand(node) if isinstance(part, GatheredOperand) else node
    if not changes:
        return None  # x is read in a way this pass does not know how to move (a scatter's)
    new = replace(kernel, **changes)
    return None if x != y and x in new.reads() else new
