"""The whole export: model.py -> capture -> lowering stages -> one package file.

This module only sequences the stages that exporter/, lowering/ and packages/ own, and writes down
what the package promises (the manifest).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from . import __version__, knobs
from .exporter import CapturedProgram, export_model
from .lowering.compile_cpp import compiler_version
from .lowering.decompositions import decompositions
from .lowering.stages import Lowered, run_stages
from .lowering.symbolic import to_json
from .lowering.targets import Targets
from .packages import identity, layout
from .packages.writer import canonical_json, write_package


@dataclass(frozen=True)
class BuildResult:
    path: Path
    manifest: dict[str, Any]
    seconds: dict[str, float]  # time per phase
    size: int
    notes: tuple[str, ...]


def _signature(captured: CapturedProgram, lowered: Lowered) -> dict[str, Any]:
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
    metadata: Mapping[str, str] | None = None,
) -> BuildResult:
    """Lowers a captured program and writes the package file to `output` (atomically).

    `name` and `version` must be registry-safe (packages/identity.py); `metadata` is the user's str -> str
    metadata (license, source revision, ...), recorded as the manifest's `user_metadata`."""
    # Identity is checked before any lowering, so a bad name fails in a second, not after a compile.
    name = identity.check_name(name, "name") if name else identity.name_from(default_name(captured.model_file))
    identity.check_version(version, "version")
    user_metadata = identity.check_metadata(metadata)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    progress("lowering to kernels and compiling them")
    isa = targets.cpu.isa if targets is not None and targets.cpu is not None else knobs.cpu_isa()
    lowered = run_stages(captured, isa, dump=dump, dump_stages=tuple(dump_stages), targets=targets)
    seconds["lower_and_compile"] = time.perf_counter() - start

    start = time.perf_counter()
    members = {
        layout.PROGRAM: canonical_json(lowered.program_json),
        layout.WEIGHTS: safetensors.torch.save(lowered.program.weights),
    }
    target_entries = []
    if lowered.library is not None:
        members[layout.cpu_library(isa)] = lowered.library_bytes
        members[layout.cpu_source(isa)] = lowered.library.source.encode()
        target_entries.append({"kind": "cpu", "arch": platform.machine(), "isa": isa, "library": layout.cpu_library(isa)})
    if lowered.cubins:
        members.update(_cuda_members(lowered))
        target_entries.append(_cuda_target(lowered))
    manifest = {
        "name": name,
        "version": version,
        "producer": {
            "aotpack": __version__,
            "torch": torch.__version__,
            "compiler": compiler_version(knobs.cxx()),
            "python": platform.python_version(),
            **({"triton": _triton_version()} if lowered.cubins else {}),
        },
        "targets": target_entries,
        "signature": _signature(captured, lowered),
        "metadata": {"kernels": len((lowered.library or lowered.triton).kernels), "steps": len(lowered.program.steps),
                     "arena_bytes": lowered.plan.arena_bytes},
        "user_metadata": user_metadata,
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


def _triton_version() -> str:
    from .lowering.compile_triton import triton_version

    return triton_version() or "unknown"


def _cuda_members(lowered: Lowered) -> dict[str, bytes]:
    """cuda/sm_<cc>/<kernel>.cubin and cuda/sm_<cc>/kernels.json per architecture, and the Triton source."""
    members: dict[str, bytes] = {}
    for arch, compiled in sorted(lowered.cubins.items()):
        entries = []
        for kernel in lowered.triton.kernels:
            c = compiled.kernels[kernel.name]
            members[layout.cuda_cubin(arch, kernel.name)] = c.cubin
            entries.append({"name": kernel.name, "cubin": layout.cuda_cubin(arch, kernel.name), "function": c.name,
                            "num_warps": c.num_warps, "shared": c.shared,
                            "global_scratch_size": c.global_scratch_size,
                            "profile_scratch_size": c.profile_scratch_size, "ptx_version": c.ptx_version})
        members[layout.cuda_kernels(arch)] = canonical_json({"arch": arch, "kernels": entries})
    members[layout.CUDA_SOURCE] = lowered.triton.source.encode()
    return members


def _cuda_target(lowered: Lowered) -> dict[str, Any]:
    compiled = [lowered.cubins[a] for a in sorted(lowered.cubins)]
    ptx = max((c.ptx_version for c in compiled), key=lambda v: tuple(map(int, v.split("."))) if v else (0,))
    return {"kind": "cuda", "archs": sorted(lowered.cubins), "ptx_version": ptx,
            "min_driver_version": max(c.min_cuda_driver for c in compiled), "source": layout.CUDA_SOURCE}


def default_name(model_file: Path) -> str:
    """examples/mlp/model.py -> "mlp"; my_net.py -> "my_net"."""
    model_file = Path(model_file)
    return model_file.resolve().parent.name if model_file.stem == "model" else model_file.stem
