"""The IR verifier: structural invariants checked between lowering stages (always in tests)."""

from __future__ import annotations

from ...errors import AotpackError
from . import scalar
from .kernels import BUFFER_KINDS, ROW_RESULT, MemoryPlan, Program, RowKernel, ScatterKernel, writes


class IRError(AotpackError):
    """The compiler broke one of its own invariants: an aotpack bug, reported with the stage's name."""


def verify_program(program: Program, stage: str) -> None:
    def fail(message: str) -> None:
        raise IRError(f"IR check after stage {stage!r} failed: {message} (this is an aotpack bug)")

    symbols = {s.expr for s in program.symbols}
    written: set[str] = set()
    for name, buf in program.buffers.items():
        if buf.kind not in BUFFER_KINDS:
            fail(f"buffer {name} has unknown kind {buf.kind}")
        for size in buf.shape:
            if not size.free_symbols <= symbols:
                fail(f"buffer {name}'s shape {buf.shape} uses undeclared symbols")
        if buf.kind == "weight" and buf.source not in program.weights:
            fail(f"weight buffer {name} names {buf.source}, which is not among the program's weights")
        if buf.kind in ("input", "weight"):
            written.add(name)
    for t, step in enumerate(program.steps):
        for read in step.reads():
            if read not in written:
                fail(f"step {t} ({step.family}) reads {read} before anything writes it")
        if isinstance(step, RowKernel):
            _verify_row(step, t, fail)
        if isinstance(step, ScatterKernel) and step.output not in written:
            fail(f"step {t} updates {step.output} in place before anything writes it")
        for output in writes(step):
            if program.buffers[output].kind in ("input", "weight"):
                fail(f"step {t} writes {output}, which is an {program.buffers[output].kind}")
            written.add(output)
    for out in program.outputs:
        if program.buffers[out].kind != "output" or out not in written:
            fail(f"output buffer {out} is not an output written by a step")


def _verify_row(step: RowKernel, t: int, fail) -> None:
    """A row kernel's parts read only the results of the reductions before them, each once computed."""
    names = [r.name for r in step.reductions]
    if len(set(names)) != len(names) or not names:
        fail(f"step {t} (row) has reductions {names}: one or more, each named once")
    for j, node in enumerate([*(r.value for r in step.reductions), step.value]):
        for load in scalar.loads(node):
            if load.buffer.startswith(ROW_RESULT) and load.buffer[len(ROW_RESULT):] not in names[:j]:
                fail(f"step {t} (row) part {j} reads {load.buffer}, which is not a result computed before it")


def verify_plan(program: Program, plan: MemoryPlan, stage: str) -> None:
    for name, offset in plan.offsets.items():
        if offset % 64 or offset + plan.max_bytes[name] > plan.arena_bytes:
            raise IRError(f"IR check after stage {stage!r} failed: buffer {name} at {offset} does not fit the arena")
