"""The whole export: model.py -> capture -> lowering stages -> one package file.

This module only sequences the stages that exporter/, lowering/ and packages/ own, and writes down
what the package promises (the manifest).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from . import __version__, knobs
from .exporter import CapturedProgram, export_model
from .lowering.codegen.printer import to_json
from .lowering.frontend.decompositions import decompositions
from .lowering.stages import Compilation, run_stages
from .lowering.targets import CpuTarget, Targets
from .packages import layout
from .packages.writer import canonical_json, write_package


@dataclass(frozen=True)
class BuildResult:
    path: Path
    manifest: dict[str, Any]
    seconds: dict[str, float]  # time per phase
    size: int
    notes: tuple[str, ...]


def _signature(captured: CapturedProgram, lowered: Compilation) -> dict[str, Any]:
    program = lowered.program

    def tensor(name: str) -> dict[str, Any]:
        buf = program.buffers[name]
        return {"name": buf.source, "dtype": buf.dtype, "shape": [to_json(s) for s in buf.shape]}

    return {
        "symbols": [{"name": s.name, "min": s.min, "max": s.max} for s in program.symbols],
        "inputs": [tensor(b) for b in program.inputs],
        "outputs": [tensor(b) for b in program.outputs],
    }


def capture_model_file(model_file: str | Path, dynamic: Iterable[str] = (), dtype: str | None = None) -> CapturedProgram:
    """model.py, `--dynamic` specs and `--dtype` -> the captured program, decomposed for the lowering."""
    return export_model(model_file, dynamic, decompositions(), dtype)


def build_package(
    captured: CapturedProgram,
    output: str | Path,
    name: str | None = None,
    version: str = "0.1.0",
    dump_stages: Sequence[str] = (),
    dump: Callable[[str, str], None] | None = None,
    progress: Callable[[str], None] = lambda message: None,
    verify: Callable[[Path, CapturedProgram], dict[str, Any]] | None = None,
    targets: Targets | None = None,
) -> BuildResult:
    """Lowers a captured program and writes the package file to `output` (atomically)."""
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    progress("lowering to kernels and compiling them")
    targets = targets or Targets(CpuTarget(knobs.cpu_isa()), None)
    lowered = run_stages(captured, targets, dump=dump, dump_stages=tuple(dump_stages))
    seconds["lower_and_compile"] = time.perf_counter() - start

    start = time.perf_counter()
    members = {
        layout.PROGRAM: canonical_json(lowered.program_json),
        layout.WEIGHTS: safetensors.torch.save(lowered.program.weights),
    }
    target_entries = []
    for backend in lowered.backends:
        members.update(backend.package_members(lowered.artifacts[backend.kind]))
        target_entries.append(backend.manifest_target(lowered.artifacts[backend.kind]))
    first = lowered.artifacts[lowered.backends[0].kind]
    manifest = {
        "name": name or default_name(captured.model_file),
        "version": version,
        "producer": {
            "aotpack": __version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            **{k: v for backend in lowered.backends for k, v in backend.producer_versions().items()},
        },
        "targets": target_entries,
        "signature": _signature(captured, lowered),
        "metadata": {"kernels": len(first.library.kernels), "steps": len(lowered.program.steps),
                     "arena_bytes": lowered.plan.arena_bytes},
    }
    output = Path(output)
    if verify is not None:
        progress("verifying the package against eager PyTorch through the C++ runtime")
        # The manifest is not covered by digests, so verification results can be added after the fact:
        # write a trial package beside the output, run it through the real runtime, then write the final one.
        trial = output.with_name(f".{output.name}.verify")
        try:
            write_package(trial, manifest, members)
            manifest["verification"] = verify(trial, captured)
        finally:
            trial.unlink(missing_ok=True)
    final = write_package(output, manifest, members)
    seconds["package"] = time.perf_counter() - start
    return BuildResult(output, final, seconds, output.stat().st_size, tuple(captured.notes))


def default_name(model_file: Path) -> str:
    """examples/mlp/model.py -> "mlp"; my_net.py -> "my_net"."""
    model_file = Path(model_file)
    return model_file.resolve().parent.name if model_file.stem == "model" else model_file.stem
