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
from .symbolic import fold_div_mod, flat_offset, index_var, product, unflatten, upper_bound

ROW_CAP = 16384
FUSED_OPS = ("sum", "prod", "max", "min", "any", "all")  # argmax/argmin carry an index: left as they are


def fuse_rows(program: Program) -> Program:
    steps = list(program.steps)
    buffers = dict(program.buffers)
    ranges = {s.expr: (s.min, s.max) for s in program.symbols}
    outputs = set(program.outputs)
    p = 0
    while p < len(steps):
        fused = _fuse_at(steps, p, program, outputs, ranges)
        if fused is None:
            p += 1
            continue
        members, kernel = fused
        steps[p] = kernel
        for t in sorted(members, reverse=True):
            del buffers[steps[t].output]
            del steps[t]
        p += 1 - len(members)
    return replace(program, steps=tuple(steps), buffers=buffers)


def _fuse_at(steps: list[Kernel], p: int, program: Program, outputs: set[str],
             ranges: dict) -> tuple[list[int], RowKernel] | None:
    consumer = steps[p]
    if not isinstance(consumer, PointwiseKernel):
        return None
    writers = Counter(s.output for s in steps)
    last_writer = {s.output: t for t, s in enumerate(steps[:p])}
    direct = [last_writer[b] for b in consumer.reads() if b in last_writer]
    reductions = [t for t in direct if isinstance(steps[t], ReductionKernel)]
    if not reductions:
        return None
    first = steps[max(reductions)]
    rows, reduced = first.shape, first.reduced
    if upper_bound(product(reduced), ranges) > ROW_CAP:
        return None
    split = _split(consumer.shape, rows, reduced)
    if split is None:
        return None

    def candidate(t: int) -> bool:
        r = steps[t]
        return (isinstance(r, ReductionKernel) and r.op in FUSED_OPS and _same(r.shape, rows)
                and _same(r.reduced, reduced) and program.buffers[r.output].kind == "arena"
                and r.output not in outputs and writers[r.output] == 1)

    group = set()  # the candidates: the reductions P reads and, transitively, those they read
    todo = [t for t in reductions if candidate(t)]
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
            if not _fits(steps, t, p, group, split):
                group.discard(t)
                changed = True
    if not group:
        return None
    members = sorted(group)
    names = {steps[t].output: program.buffers[steps[t].output].dtype for t in members}
    results = {load: row_result(load.buffer, names[load.buffer])
               for node in (consumer.value, *(steps[t].value for t in members))
               for load in scalar.loads(node) if load.buffer in names}
    parts = tuple(RowReduction(steps[t].output, scalar.substitute(steps[t].value, {}, results), steps[t].op,
                               steps[t].acc_dtype, steps[t].out_dtype) for t in members)
    value = scalar.map_indices(scalar.substitute(consumer.value, {}, results), fold_div_mod)
    value = scalar.substitute(value, _row_indices(consumer.shape, split, rows, reduced))
    value = scalar.map_indices(value, lambda e: _unwrapped(e, dict(zip(_vars("i", rows), rows))))
    return members, RowKernel(consumer.output, rows, reduced, parts, value)


def _fits(steps: list[Kernel], t: int, p: int, group: set[int], split: int) -> bool:
    """Whether reduction t can move into the row kernel at p with the rest of `group`."""
    r = steps[t]
    consumer = steps[p]
    readers = [u for u in range(t + 1, len(steps)) if r.output in steps[u].reads()]
    if any(u != p and u not in group for u in readers):
        return False  # another step reads the stored result
    own_row = {p: flat_offset("i", consumer.shape[:split])}
    own_row.update({u: flat_offset("i", r.shape) for u in group})
    for u in readers:
        for load in scalar.loads(steps[u].value):
            if load.buffer == r.output and (load.indirect or sympy.expand(fold_div_mod(load.index) - own_row[u]) != 0):
                return False
    if consumer.output in r.reads():
        return False
    reads = set(r.reads())
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
