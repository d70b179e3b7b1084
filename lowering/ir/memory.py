"""Memory planning: every intermediate gets a fixed offset in one arena sized for the declared maxima.

Buffers whose lifetimes do not overlap share bytes. The plan is computed once at export; a run then
allocates nothing, whatever the input sizes within their ranges.
"""

from __future__ import annotations

from .dtypes import itemsize
from .kernels import MemoryPlan, Program, writes
from .symbolic import product, upper_bound

ALIGNMENT = 64


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def max_bytes(program: Program, name: str) -> int:
    buf = program.buffers[name]
    ranges = {s.expr: (s.min, s.max) for s in program.symbols}
    return upper_bound(product(buf.shape), ranges) * itemsize(buf.dtype)


def plan_memory(program: Program) -> MemoryPlan:
    """First-fit placement in order of definition; a buffer is live from its writer to its last reader."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for t, step in enumerate(program.steps):
        for written in writes(step):
            first.setdefault(written, t)
            last[written] = max(last.get(written, t), t)
        for name in step.reads():
            last[name] = t
    sizes = {name: max_bytes(program, name) for name, b in program.buffers.items() if b.kind in ("arena", "output")}
    placed: list[tuple[int, int, int, int]] = []  # offset, size, first step, last step
    offsets: dict[str, int] = {}
    arena_names = [n for n, b in program.buffers.items() if b.kind == "arena" and n in first]
    for name in sorted(arena_names, key=lambda n: first[n]):
        size, start, end = _align(max(sizes[name], 1)), first[name], last[name]
        clashes = sorted((o, s) for o, s, a, b in placed if not (b < start or end < a))
        offset = 0
        for o, s in clashes:
            if offset + size <= o:
                break
            offset = max(offset, o + s)
        offsets[name] = offset
        placed.append((offset, size, start, end))
    arena = max((o + s for o, s, _, _ in placed), default=0)
    return MemoryPlan(offsets=offsets, max_bytes=sizes, arena_bytes=arena)
