"""The compiler as an ordered list of named stages, built from the backends of a package's targets.

    lower            captured ATen graph -> kernel IR (frontend/: views as index math, elementwise chains
                     fused, one lowering per op in frontend/ops/; then ir/dedupe.py drops kernels that
                     repeat an earlier one, ir/sibling_products.py merges products of one operand,
                     ir/epilogue.py fuses each matrix product's elementwise consumer into it, or the work
                     its readers share, ir/paired_products.py computes a product and the one its epilogue
                     reads (a gated MLP's) in one kernel, ir/copy_elision.py turns copies into views of what
                     they copy, ir/row_fusion.py fuses row reductions and their pointwise consumer into
                     row kernels, ir/stacked_pointwise.py stacks sibling pointwise steps, and, where it is on,
                     ir/norm_folding.py folds norms between products into them)
    <layout passes>  kernel IR -> kernel IR, each backend's (cpu: prepack_weights, the matmul weights laid
                     out in the panels its kernel reads; cuda: transpose_kn_weights, [K, N] weights stored
                     [N, K] as nn.Linear's are)
    plan_memory      kernel IR -> arena offsets for every intermediate, sized for the declared maxima (ir/)
    render_<lang>    kernel IR -> one library of kernels from templates/<lang>/, per backend (codegen/ core,
                     backends/<kind>/ spellings): render_cpp, render_triton
    compile_<lang>   library -> binaries, per backend: compile_cpp (kernels.so), compile_triton (cubins, with
                     any kernel whose block needs more shared memory than a target gives rendered smaller)
    serialize        everything -> program.json's plain data (packages/program.py writes it)

A package for `--target cpu,cuda` runs lower, prepack_weights, transpose_kn_weights, plan_memory, render_cpp,
compile_cpp, render_triton, compile_triton, serialize. The IR is verified after every stage that changes it. Any
stage's output can be printed with `aotpack export --dump STAGE`.
"""

from __future__ import annotations

import json
import pprint
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .. import knobs, progress
from ..exporter import CapturedProgram
from ..packages.program import Binding, BufferEntry, ProgramDoc, SymbolEntry, program_json
from .backends import Artifacts, Backend, backends_for
from .codegen.printer import to_json
from .frontend.graph import GraphLowering
from .ir.algebra import simplify_values
from .ir.copy_elision import elide_copies
from .ir.dedupe import dedupe_kernels
from .ir.epilogue import fuse_epilogues, fuse_shared_epilogues
from .ir.kernels import MemoryPlan, Program
from .ir.memory import plan_memory
from .ir.norm_folding import fold_norms
from .ir.paired_products import pair_products
from .ir.row_fusion import fuse_rows
from .ir.sibling_products import merge_sibling_products
from .ir.stacked_pointwise import stack_pointwise
from .ir.verify import verify_plan, verify_program
from .perturb import perturbed
from .targets import Targets


@dataclass(frozen=True)
class Compilation:
    """What the stages have made so far; each stage fills in its part and hands on a new one."""

    captured: CapturedProgram  # what `lower` reads
    backends: tuple[Backend, ...]
    program: Program | None = None
    plan: MemoryPlan | None = None
    artifacts: Mapping[str, Artifacts] = field(default_factory=dict)  # backend kind -> its library and binaries
    program_json: dict[str, Any] | None = None

    def with_artifacts(self, backend: Backend, **changes: Any) -> Compilation:
        old = self.artifacts.get(backend.kind, Artifacts())
        return replace(self, artifacts={**self.artifacts, backend.kind: replace(old, **changes)})


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Compilation], Compilation]
    describe: Callable[[Compilation], str]  # its output, readable, for --dump


def lower(captured: CapturedProgram) -> Program:
    """The `lower` stage: the captured graph as kernel IR, its values simplified (ir/algebra.py), repeated
    kernels dropped, matrix-product epilogues fused, then row reductions fused with their consumers, and sibling
    pointwise steps stacked, then norms between products folded into them where ir/norm_folding.py is on (scripts
    and tests that look at the kernels an export makes call this). Row fusion
    runs after the others: the passes before it need not know row kernels, and it sees the consumers they leave;
    stacking, last, sees the pointwise steps that nothing fused."""
    program = GraphLowering(captured).run()
    factor = knobs.test_perturb()
    if factor is not None:
        program = perturbed(program, factor)
    program = merge_sibling_products(dedupe_kernels(simplify_values(program)))
    program = stack_pointwise(fuse_rows(elide_copies(fuse_shared_epilogues(pair_products(fuse_epilogues(program))))))
    return fold_norms(program)


def _lower(state: Compilation) -> Compilation:
    program = lower(state.captured)
    verify_program(program, "lower")
    return replace(state, program=program)


def _layout(name: str, layout_pass: Callable[[Program], Program]) -> Callable[[Compilation], Compilation]:
    def run(state: Compilation) -> Compilation:
        program = layout_pass(state.program)
        verify_program(program, name)
        return replace(state, program=program)

    return run


def _plan(state: Compilation) -> Compilation:
    plan = plan_memory(state.program)
    verify_plan(state.program, plan, "plan_memory")
    return replace(state, plan=plan)


def _render(backend: Backend) -> Callable[[Compilation], Compilation]:
    return lambda state: state.with_artifacts(backend, library=backend.render(state.program))


def _compile(backend: Backend) -> Callable[[Compilation], Compilation]:
    # The backend may hand back another library than it was given (CUDA: kernels rendered smaller to fit a
    # target's shared memory): later stages package the one its binaries were compiled from.
    def run(state: Compilation) -> Compilation:
        compiled = backend.compile(state.program, state.artifacts[backend.kind].library)
        return state.with_artifacts(backend, library=compiled.library, binaries=compiled.binaries)

    return run


def _serialize(state: Compilation) -> Compilation:
    return replace(state, program_json=program_json(plan_document(state)))


def stages_for(backends: tuple[Backend, ...]) -> tuple[Stage, ...]:
    return (
        Stage("lower", _lower, _describe_program),
        *(Stage(name, _layout(name, layout_pass), _describe_program)
          for backend in backends for name, layout_pass in backend.layout_passes()),
        Stage("plan_memory", _plan, lambda state: pprint.pformat(state.plan, width=120)),
        *(stage for backend in backends for stage in (
            Stage(f"render_{backend.language}", _render(backend),
                  lambda state, b=backend: state.artifacts[b.kind].library.source),
            Stage(f"compile_{backend.language}", _compile(backend),
                  lambda state, b=backend: b.describe_binaries(state.artifacts[b.kind].binaries)))),
        Stage("serialize", _serialize, lambda state: json.dumps(state.program_json, indent=1)),
    )


def stage_names(targets: Targets) -> tuple[str, ...]:
    return tuple(stage.name for stage in stages_for(backends_for(targets)))


def run_stages(captured: CapturedProgram, targets: Targets, dump: Callable[[str, str], None] | None = None,
               dump_stages: tuple[str, ...] = ()) -> Compilation:
    backends = backends_for(targets)
    state = Compilation(captured, backends)
    report = progress.current()
    for stage in stages_for(backends):
        with report.stage(stage.name):
            state = stage.run(state)
        if dump is not None and stage.name in dump_stages:
            dump(stage.name, stage.describe(state))
    return state


def _describe_program(state: Compilation) -> str:
    program = state.program
    lines = [f"symbols: {program.symbols}"]
    lines += [f"  {b.name}: {b.kind} {b.dtype}{list(b.shape)} {b.source or ''}" for b in program.buffers.values()]
    lines += [f"step {t}: {pprint.pformat(step, width=120)}" for t, step in enumerate(program.steps)]
    return "\n".join(lines)


def plan_document(state: Compilation) -> ProgramDoc:
    """The program, its memory plan and every backend's steps as program.json's plain data."""
    program, plan = state.program, state.plan
    ids = {name: i for i, name in enumerate(program.buffers)}
    buffers = []
    for name, buf in program.buffers.items():
        if buf.kind == "input":
            place = {"input": program.inputs.index(name)}
        elif buf.kind == "weight":
            place = {"weight": buf.source}
        elif buf.kind == "arena":
            if name not in plan.offsets:
                continue  # never written: nothing to place
            place = {"offset": plan.offsets[name], "max_bytes": plan.max_bytes[name]}
        else:
            place = {"output": program.outputs.index(name), "max_bytes": plan.max_bytes[name]}
        buffers.append(BufferEntry(ids[name], buf.kind, buf.dtype, tuple(to_json(s) for s in buf.shape), place))
    first = state.backends[0]
    sections = {}
    for backend in state.backends:
        section = backend.plan_section(state.artifacts[backend.kind].library, ids)
        if section is not None:
            sections[backend.kind] = section
    return ProgramDoc(
        symbols=tuple(SymbolEntry(s.name, s.min, s.max) for s in program.symbols),
        inputs=tuple(Binding(program.buffers[b].source, ids[b]) for b in program.inputs),
        outputs=tuple(Binding(program.buffers[b].source, ids[b]) for b in program.outputs),
        buffers=tuple(buffers),
        arena_bytes=plan.arena_bytes,
        # The first target's steps (the CPU's when it has one): see packages/program.py.
        steps=first.plan_steps(state.artifacts[first.kind].library, ids),
        sections=sections,
    )
