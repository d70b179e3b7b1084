"""The lowering pipeline as an ordered list of named stages. Reading STAGES tells the whole compiler.

    lower        ATen graph -> kernel IR (views as index math, elementwise chains fused, see values.py)
    plan_memory  kernel IR -> arena offsets for every intermediate, sized for the declared maxima
    render_cpp   kernel IR -> one C++ source from templates/cpp (identical kernels once)
    compile_cpp  C++ source -> kernels.so bytes (cached by source hash)
    render_triton  kernel IR -> one Triton module from templates/triton (CUDA targets only)
    compile_triton Triton module -> one cubin per kernel and CUDA arch (cached; no GPU needed)
    serialize    everything -> program.json (docs/package-format.md)

Any stage's output can be printed with `aotpack export --dump STAGE`.
"""

from __future__ import annotations

import pprint
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .. import knobs, progress
from . import (  # noqa: F401  (registration)
    ops_attention,
    ops_distance,
    ops_index,
    ops_linalg,
    ops_norm,
    ops_pointwise,
    ops_pool,
    ops_reduce,
    ops_scatter,
    ops_sort,
    ops_views,
)
from .codegen_cpp import RenderedLibrary, render_library
from .codegen_triton import TritonLibrary, render_triton_library
from .compile_cpp import compile_library
from .graph import GraphLowering
from .ir import MemoryPlan, Program
from .memory import plan_memory
from .perturb import perturbed
from .symbolic import to_json
from .targets import CpuTarget, Targets
from .verify import verify_plan, verify_program


@dataclass(frozen=True)
class Lowered:
    program: Program | None = None
    plan: MemoryPlan | None = None
    library: RenderedLibrary | None = None
    library_bytes: bytes | None = None
    program_json: dict[str, Any] | None = None
    isa: str = "x86-64-v3"
    targets: Targets | None = None  # None: the CPU at `isa` only
    triton: TritonLibrary | None = None
    cubins: dict[int, Any] | None = None  # arch -> compile_triton.CompiledArch

    @property
    def wants_cpu(self) -> bool:
        return self.targets is None or self.targets.cpu is not None


def _lower(state: Lowered, captured: Any) -> Lowered:
    program = GraphLowering(captured).run()
    factor = knobs.test_perturb()
    if factor is not None:
        program = perturbed(program, factor)
    verify_program(program, "lower")
    return replace(state, program=program)


def _plan(state: Lowered, captured: Any) -> Lowered:
    plan = plan_memory(state.program)
    verify_plan(state.program, plan, "plan_memory")
    return replace(state, plan=plan)


def _render(state: Lowered, captured: Any) -> Lowered:
    if not state.wants_cpu:
        return state
    return replace(state, library=render_library(state.program))


def _compile(state: Lowered, captured: Any) -> Lowered:
    if not state.wants_cpu:
        return state
    return replace(state, library_bytes=compile_library(state.library.source, state.isa))


def _render_triton(state: Lowered, captured: Any) -> Lowered:
    if state.targets is None or state.targets.cuda is None:
        return state
    return replace(state, triton=render_triton_library(state.program))


def _compile_triton(state: Lowered, captured: Any) -> Lowered:
    if state.triton is None:
        return state
    from .compile_triton import compile_triton_library  # imports Triton only when exporting for CUDA

    return replace(state, cubins=compile_triton_library(state.triton, state.targets.cuda.archs))


def _serialize(state: Lowered, captured: Any) -> Lowered:
    return replace(state, program_json=program_to_json(state.program, state.plan, state.library, state.triton))


STAGES: tuple[tuple[str, Callable[[Lowered, Any], Lowered]], ...] = (
    ("lower", _lower),
    ("plan_memory", _plan),
    ("render_cpp", _render),
    ("compile_cpp", _compile),
    ("render_triton", _render_triton),
    ("compile_triton", _compile_triton),
    ("serialize", _serialize),
)
STAGE_NAMES = tuple(name for name, _ in STAGES)


def run_stages(captured: Any, isa: str, dump: Callable[[str, str], None] | None = None,
               dump_stages: tuple[str, ...] = (), targets: Targets | None = None) -> Lowered:
    if targets is not None and targets.cpu is not None:
        isa = targets.cpu.isa
    state = Lowered(isa=isa, targets=targets or Targets(CpuTarget(isa), None))
    report = progress.current()
    for name, stage in STAGES:
        if _applies(name, state):
            with report.stage(name):
                state = stage(state, captured)
        if dump is not None and name in dump_stages:
            dump(name, describe(name, state))
    return state


def _applies(name: str, state: Lowered) -> bool:
    """Whether a stage has work for this package's targets (so progress does not list the others)."""
    if name in ("render_cpp", "compile_cpp"):
        return state.wants_cpu
    if name in ("render_triton", "compile_triton"):
        return state.targets is not None and state.targets.cuda is not None
    return True


def describe(stage: str, state: Lowered) -> str:
    """A readable dump of what `stage` produced."""
    if stage == "lower":
        lines = [f"symbols: {state.program.symbols}"]
        lines += [f"  {b.name}: {b.kind} {b.dtype}{list(b.shape)} {b.source or ''}" for b in state.program.buffers.values()]
        lines += [f"step {t}: {pprint.pformat(step, width=120)}" for t, step in enumerate(state.program.steps)]
        return "\n".join(lines)
    if stage == "plan_memory":
        return pprint.pformat(state.plan, width=120)
    if stage == "render_cpp":
        return state.library.source if state.library else "(no CPU target)"
    if stage == "compile_cpp":
        return f"kernels.so: {len(state.library_bytes)} bytes" if state.library_bytes else "(no CPU target)"
    if stage == "render_triton":
        return state.triton.source if state.triton else "(no CUDA target)"
    if stage == "compile_triton":
        if not state.cubins:
            return "(no CUDA target)"
        return "\n".join(f"sm_{arch}: {len(c.kernels)} cubins, {sum(len(k.cubin) for k in c.kernels.values())} bytes, "
                         f"PTX {c.ptx_version}" for arch, c in state.cubins.items())
    import json

    return json.dumps(state.program_json, indent=1)


def program_to_json(program: Program, plan: MemoryPlan, library: RenderedLibrary | None,
                    triton: TritonLibrary | None = None) -> dict[str, Any]:
    ids = {name: i for i, name in enumerate(program.buffers)}
    buffers = []
    for name, buf in program.buffers.items():
        entry: dict[str, Any] = {"id": ids[name], "kind": buf.kind, "dtype": buf.dtype,
                                 "shape": [to_json(s) for s in buf.shape]}
        if buf.kind == "input":
            entry["input"] = program.inputs.index(name)
        elif buf.kind == "weight":
            entry["weight"] = buf.source
        elif buf.kind == "arena":
            if name not in plan.offsets:
                continue  # never written: nothing to place
            entry["offset"] = plan.offsets[name]
            entry["max_bytes"] = plan.max_bytes[name]
        else:
            entry["output"] = program.outputs.index(name)
            entry["max_bytes"] = plan.max_bytes[name]
        buffers.append(entry)
    # The CPU's steps, or on a CUDA-only package the CUDA kernels' (which an older runtime then refuses
    # cleanly: it finds no CPU target).
    steps = library if library is not None else triton
    out = {
        "symbols": [{"name": s.name, "min": s.min, "max": s.max} for s in program.symbols],
        "inputs": [{"name": program.buffers[b].source, "buffer": ids[b]} for b in program.inputs],
        "outputs": [{"name": program.buffers[b].source, "buffer": ids[b]} for b in program.outputs],
        "buffers": buffers,
        "arena_bytes": plan.arena_bytes,
        "steps": [{"kernel": k, "args": [ids[a] for a in args]} for k, args in zip(steps.step_kernels, steps.step_args)],
    }
    if triton is not None:
        out["cuda"] = {
            "kernels": [{"name": k.name, "symbols": list(k.symbols), "errors": list(k.errors)} for k in triton.kernels],
            "steps": [{"kernel": k, "args": [ids[a] for a in args], "grid": [to_json(g) for g in grid]}
                      for k, args, grid in zip(triton.step_kernels, triton.step_args, triton.step_grids)],
        }
    return out
