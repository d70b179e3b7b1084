"""The whole export: model.py -> capture -> lowering stages -> one package file.

This module only sequences the stages that exporter/, lowering/ and packages/ own, and writes down
what the package promises (the manifest).
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from . import __version__, knobs, progress
from .errors import AotpackError
from .exporter import CapturedProgram, export_model
from .lowering.compile_cpp import compiler_version
from .lowering.decompositions import decompositions
from .lowering.stages import Lowered, run_stages
from .lowering.symbolic import to_json
from .lowering.targets import Targets
from .packages import identity, layout
from .packages.manifest import make_manifest, with_verification
from .packages.writer import canonical_json, write_package


@dataclass(frozen=True)
class ExportResult:
    path: Path
    manifest: dict[str, Any]
    seconds: dict[str, float]  # time per stage, in the order they ran
    size: int
    notes: tuple[str, ...]

    @property
    def verification(self) -> dict[str, Any] | None:
        """The manifest's verification record; None when exported with verification off."""
        return self.manifest.get("verification")


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
    verify: str = "range",
    targets: Targets | None = None,
    metadata: Mapping[str, str] | None = None,
) -> ExportResult:
    """Lowers a captured program, verifies it (`verify`: range, example or off; verification/run.py) and writes
    the package file to `output` (atomically). Stages report through progress.current().

    `name` and `version` must be registry-safe (packages/identity.py); `metadata` is the user's str -> str
    metadata (license, source revision, ...), recorded as the manifest's `user_metadata`."""
    from .verification import MODES

    if verify not in MODES:
        raise AotpackError(f"--verify={verify}: expected one of {', '.join(MODES)}")
    name, user_metadata = check_identity(name, version, metadata, captured.model_file if captured else None)
    with progress.ensure() as report:
        return _build(captured, Path(output), name, version, dump_stages, dump, verify, targets, report, user_metadata)


def check_identity(name: str | None, version: str, metadata: Mapping[str, str] | None,
                   model_file: str | Path | None = None) -> tuple[str, dict[str, str]]:
    """The package name (a default one made registry-safe from the model file) and the user metadata, or an
    IdentityError with the rule; cheap, so callers run it before anything slow."""
    if name:
        identity.check_name(name, "name")
    elif model_file is not None:
        name = identity.name_from(default_name(Path(model_file)))
    identity.check_version(version, "version")
    return name, identity.check_metadata(metadata)


def _build(captured: CapturedProgram, output: Path, name: str | None, version: str, dump_stages: Sequence[str],
           dump: Callable[[str, str], None] | None, verify: str, targets: Targets | None,
           report: progress.Progress, user_metadata: Mapping[str, str]) -> ExportResult:
    from .verification import verify_package

    isa = targets.cpu.isa if targets is not None and targets.cpu is not None else knobs.cpu_isa()
    lowered = run_stages(captured, isa, dump=dump, dump_stages=tuple(dump_stages), targets=targets)

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
    manifest = make_manifest(
        name=name or default_name(captured.model_file),
        version=version,
        producer={
            "aotpack": __version__,
            "torch": torch.__version__,
            "compiler": compiler_version(knobs.cxx()),
            "python": platform.python_version(),
            **({"triton": _triton_version()} if lowered.cubins else {}),
        },
        targets=target_entries,
        signature=_signature(captured, lowered),
        metadata={"kernels": len((lowered.library or lowered.triton).kernels), "steps": len(lowered.program.steps),
                  "arena_bytes": lowered.plan.arena_bytes},
        user_metadata=user_metadata,
    )
    if verify != "off":
        # The verification record goes into the manifest, so the package is written twice: a trial beside the
        # output that the real runtime runs, then the final file with the record.
        trial = output.with_name(f".{output.name}.verify")
        try:
            write_package(trial, manifest, members)
            what = "the examples and the ends and inside of each range" if verify == "range" else "the examples"
            with report.stage("verify", f"against PyTorch at {what}"):
                record = verify_package(trial, captured, verify)
            manifest = with_verification(manifest, record)
        finally:
            trial.unlink(missing_ok=True)
    with report.stage("write"):
        final = write_package(output, manifest, members)
    return ExportResult(output, final, dict(report.seconds), output.stat().st_size, tuple(captured.notes))


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
