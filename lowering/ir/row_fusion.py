"""Row kernels: reductions over whole rows and the pointwise kernel that consumes them, in one kernel.

A decomposed layer norm is three kernels: the row sums for the mean, the sums of squared deviations for the
variance (reading the mean), and the pointwise kernel that normalises each element with its row's two
results. RMS norm is two, softmax three (max, sum of exponentials, the division). Run apart, each is a launch
and a pass over the rows; fused into one kernel in which each program (C++: each loop iteration) holds whole
rows, the results stay in registers and the rows are read once from memory (cache) per part, in every
backend, from this one rule (RowKernel, a persistent reduction).

A pointwise step P at position p and reductions R1, ..., Rk before it form a row kernel when:
- every Rj has the same rows (shape) and the same reduced extent, of at most ROW_CAP elements over the
  declared ranges, and folds with one of FUSED_OPS;
- P's shape splits into leading dimensions covering the rows and trailing ones covering the reduced extent
  (spelled freely: (batch*seq, 64) covers rows (batch, seq) and a row of 64), so P's element is (row, r);
- each Rj's output is an intermediate written once, read only by P and the other Rj, each time at the
  reader's own row (not through an index taken from data), and never read outside the group: results are
  not stored, so a reduction that some other step reads stays a step of its own (the row kernel then reads
  its buffer like any input);
- no step between Rj and P writes what Rj reads (Rj moves down to P), and no Rj reads P's output.
The group is the reductions P reads, with the reductions those read, pruned until every condition holds;
patterns that do not qualify stay as they are. A reduction's result is rounded to its stored dtype before
its readers use it (row_result), so the fused program computes what the unfused one did, bit for bit.

Why ROW_CAP: a program holds a whole row of each part's value in registers (Triton: RBLOCK, the row length
rounded up to a power of two, per program). 16384 float32 elements are 64 KiB, what a block of 8 warps can
keep in registers and spill little; longer rows (a vocabulary-wide softmax) keep the looped reduction
kernels, which visit a row RBLOCK elements at a time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import sympy
from torch.utils._sympy import functions as tf

from . import scalar
from .kernels import Kernel, PointwiseKernel, Program, ReductionKernel, RowKernel, RowReduction, row_result
from .symbolic import flat_offset, fold_div_mod, index_var, product, unflatten, upper_bound

ROW_CAP = 16384
FUSED_OPS = ("sum", "prod", "max", "min", "any", "all")  # argmax/argmin carry an index: left as they are
# A pointwise part read by several parts is inlined into each; the C++ kernel recomputes it in each pass over
# the row (Triton computes it once: one body for all parts). Up to this many nodes (the frontend's bound for
# recomputed broadcasts, frontend/graph.py) recomputing costs less than the launch and the round trip saved.
SHARED_PART_MAX_NODES = 48


def fuse_rows(program: Program) -> Program:
    steps = list(program.steps)
    buffers = dict(program.buffers)
    ranges = {s.expr: (s.min, s.max) for s in program.symbols}
    outputs = set(program.outputs)
    # Consumers from the last step back: the last pointwise pass of a chain (softmax's division, after the
    # exponentials that the sum reads) gathers the whole chain, where the first would take only its head.
    p = len(steps) - 1
    while p >= 0:
        fused = _fuse_at(steps, p, program, outputs, ranges)
        if fused is None:
            p -= 1
            continue
        members, kernel = fused
        steps[p] = kernel
        for t in sorted(members, reverse=True):
            del buffers[steps[t].output]
            del steps[t]
        p -= len(members) + 1
    return replace(program, steps=tuple(steps), buffers=buffers)


def _fuse_at(steps: list[Kernel], p: int, program: Program, outputs: set[str],
             ranges: dict) -> tuple[list[int], RowKernel] | None:
    consumer = steps[p]
    if not isinstance(consumer, PointwiseKernel):
        return None
    writers = Counter(s.output for s in steps)
    last_writer = {s.output: t for t, s in enumerate(steps[:p])}
    reductions = _reductions_behind(steps, consumer, last_writer)
    if not reductions:
        return None
    first = steps[max(reductions)]
    rows, reduced = first.shape, first.reduced
    if upper_bound(product(reduced), ranges) > ROW_CAP:
        return None
    # every part's expression over the row kernel's indices (i over rows, r over a row), offsets folded
    normal: dict[int, scalar.Node] = {}

    def normalised(t: int) -> scalar.Node | None:
        if t not in normal:
            step = steps[t]
            if isinstance(step, ReductionKernel):
                normal[t] = scalar.map_indices(step.value, fold_div_mod)
            else:
                split = _split(step.shape, rows, reduced)
                if split is None:
                    return None
                value = scalar.map_indices(step.value, fold_div_mod)
                value = scalar.substitute(value, _row_indices(step.shape, split, rows, reduced))
                normal[t] = scalar.map_indices(value, lambda e: _unwrapped(e, dict(zip(_vars("i", rows), rows))))
        return normal[t]

    if normalised(p) is None:
        return None

    def candidate(t: int) -> bool:
        r = steps[t]
        if program.buffers[r.output].kind != "arena" or r.output in outputs or writers[r.output] != 1:
            return False
        if isinstance(r, ReductionKernel):
            same_rows = r.op in FUSED_OPS and _same(r.shape, rows) and _same(r.reduced, reduced)
            return same_rows and normalised(t) is not None
        if not isinstance(r, PointwiseKernel) or normalised(t) is None:
            return False
        readers = sum(r.output in s.reads() for s in steps)
        return readers == 1 or scalar.size_of(r.value) <= SHARED_PART_MAX_NODES

    group = set()  # the candidates: the parts P reads and, transitively, the parts they read
    todo = [last_writer[b] for b in consumer.reads() if b in last_writer and candidate(last_writer[b])]
    while todo:
        t = todo.pop()
        if t in group:
            continue
        group.add(t)
        todo += [last_writer[b] for b in steps[t].reads() if b in last_writer and candidate(last_writer[b])]
    changed = True
    while changed:
        changed = False
        for t in sorted(group):
            if not _fits(steps, t, p, group, normal, rows, reduced):
                group.discard(t)
                changed = True
    if not any(isinstance(steps[t], ReductionKernel) for t in group):
        return None
    members = sorted(group)
    # each member's loads stand for: a reduction's result at the row, or a pointwise part's value (inlined,
    # rounded to its stored dtype as the unfused program stored it)
    stand_ins: dict[scalar.Load, scalar.Node] = {}
    parts = []
    for t in members:
        step = steps[t]
        value = scalar.substitute(normal[t], {}, stand_ins)
        dtype = program.buffers[step.output].dtype
        if isinstance(step, ReductionKernel):
            parts.append(RowReduction(step.output, value, step.op, step.acc_dtype, step.out_dtype))
            stand = row_result(step.output, dtype)
        else:
            stand = scalar.cast(value, dtype)
        for node in (normal[u] for u in (*members, p)):
            stand_ins.update({load: stand for load in scalar.loads(node) if load.buffer == step.output})
    value = scalar.substitute(normal[p], {}, stand_ins)
    return members, RowKernel(consumer.output, rows, reduced, tuple(parts), value)


def _reductions_behind(steps: list[Kernel], consumer: PointwiseKernel, last_writer: dict[str, int]) -> list[int]:
    """The reductions the consumer reads, directly or through pointwise steps (a cast after RMS norm)."""
    found, seen = [], set()
    todo = [last_writer[b] for b in consumer.reads() if b in last_writer]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if isinstance(steps[t], ReductionKernel):
            found.append(t)
        elif isinstance(steps[t], PointwiseKernel):
            todo += [last_writer[b] for b in steps[t].reads() if b in last_writer and last_writer[b] < t]
    return found


def _fits(steps: list[Kernel], t: int, p: int, group: set[int], normal: dict[int, scalar.Node],
          rows: tuple[sympy.Expr, ...], reduced: tuple[sympy.Expr, ...]) -> bool:
    """Whether part t (a reduction or a pointwise producer) can move into the row kernel at p with the rest of
    `group`: read only inside it, each time at the reader's own row (a reduction) or element (a pointwise
    part), and nothing it reads written between t and p."""
    step = steps[t]
    readers = [u for u in range(t + 1, len(steps)) if step.output in steps[u].reads()]
    if any(u != p and u not in group for u in readers):
        return False  # another step reads the stored result
    row = flat_offset("i", rows)
    own = row if isinstance(step, ReductionKernel) else sympy.expand(row * product(reduced) + flat_offset("r", reduced))
    for u in readers:
        for load in scalar.loads(normal[u]):
            if load.buffer == step.output and (load.indirect or sympy.expand(load.index - own) != 0):
                return False
    if steps[p].output in step.reads():
        return False
    reads = set(step.reads())
    return not any(steps[s].output in reads for s in range(t + 1, p) if s not in group)


def _vars(prefix: str, shape: tuple[sympy.Expr, ...]) -> list[sympy.Symbol]:
    return [index_var(prefix, d) for d in range(len(shape))]


def _unwrapped(expr: sympy.Expr, sizes: dict[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """`expr` with each wrap of a row index by its own dimension's size dropped (v mod size is v, v // size
    is 0, for 0 <= v < size): what re-spelling the consumer's row as the row kernel's leaves, e.g. a
    position (i0 mod seq) of a (batch*seq) row is i1 of rows (batch, seq)."""
    def same(v: sympy.Expr, size: sympy.Expr) -> bool:
        return v in sizes and sympy.expand(size - sizes[v]) == 0

    changes = {}
    for atom in expr.atoms(sympy.Mod, tf.Mod, tf.PythonMod, tf.ModularIndexing, tf.FloorDiv):
        if isinstance(atom, tf.ModularIndexing):
            x, div, mod = atom.args
            if div == 1 and same(x, mod):
                changes[atom] = x
        elif isinstance(atom, tf.FloorDiv):
            if same(*atom.args):
                changes[atom] = sympy.Integer(0)
        elif same(*atom.args):
            changes[atom] = atom.args[0]
    return sympy.expand(expr.xreplace(changes)) if changes else expr


def _same(a: tuple[sympy.Expr, ...], b: tuple[sympy.Expr, ...]) -> bool:
    return len(a) == len(b) and all(sympy.expand(x - y) == 0 for x, y in zip(a, b))


def _split(shape: tuple[sympy.Expr, ...], rows: tuple[sympy.Expr, ...], reduced: tuple[sympy.Expr, ...]) -> int | None:
    """Where the consumer's shape splits into dimensions over the rows and dimensions over a row, if it does."""
    for split in range(len(shape) + 1):
        if (sympy.expand(product(shape[:split]) - product(rows)) == 0
                and sympy.expand(product(shape[split:]) - product(reduced)) == 0):
            return split
    return None


def _row_indices(shape: tuple[sympy.Expr, ...], split: int, rows: tuple[sympy.Expr, ...],
                 reduced: tuple[sympy.Expr, ...]) -> dict[sympy.Symbol, sympy.Expr]:
    """The consumer's index variables as expressions of the row kernel's (i over rows, r over a row)."""
    out: dict[sympy.Symbol, sympy.Expr] = {}
    if _same(shape[:split], rows):
        out.update({index_var("i", d): index_var("i", d) for d in range(split)})
    else:
        out.update(unflatten(shape[:split], flat_offset("i", rows), "i"))
    if _same(shape[split:], reduced):
        out.update({index_var("i", split + d): index_var("r", d) for d in range(len(reduced))})
    else:
        out.update(unflatten(shape[split:], flat_offset("r", reduced), "i", split))
    return out
