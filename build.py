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
from .lowering.codegen.printer import to_json
from .lowering.frontend.decompositions import decompositions
from .lowering.stages import Compilation, run_stages
from .lowering.targets import CpuTarget, Targets
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
    from .verification import VerificationError, verify_package

    targets = targets or Targets(CpuTarget(knobs.cpu_isa()), None)
    lowered = run_stages(captured, targets, dump=dump, dump_stages=tuple(dump_stages))

    members = {
        layout.PROGRAM: canonical_json(lowered.program_json),
        layout.WEIGHTS: safetensors.torch.save(lowered.program.weights),
    }
    target_entries = []
    for backend in lowered.backends:
        members.update(backend.package_members(lowered.artifacts[backend.kind]))
        target_entries.append(backend.manifest_target(lowered.artifacts[backend.kind]))
    first = lowered.artifacts[lowered.backends[0].kind]
    manifest = make_manifest(
        name=name or default_name(captured.model_file),
        version=version,
        producer={
            "aotpack": __version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            **{k: v for backend in lowered.backends for k, v in backend.producer_versions().items()},
        },
        targets=target_entries,
        signature=_signature(captured, lowered),
        metadata={"kernels": len(first.library.kernels), "steps": len(lowered.program.steps),
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
                try:
                    record = verify_package(trial, captured, verify)
                except VerificationError as e:
                    if targets.cuda is None or not targets.cuda.tune or "cuda" not in e.devices:
                        raise
                    raise VerificationError(
                        f"{e}\nIts CUDA kernels' configurations were tuned on this GPU; if it passes with "
                        "`--no-tune` (the tables' configurations), please report both.", e.devices) from e
            manifest = with_verification(manifest, record)
        finally:
            trial.unlink(missing_ok=True)
    with report.stage("write"):
        final = write_package(output, manifest, members)
    return ExportResult(output, final, dict(report.seconds), output.stat().st_size, tuple(captured.notes))


def default_name(model_file: Path) -> str:
    """examples/mlp/model.py -> "mlp"; my_net.py -> "my_net"."""
    model_file = Path(model_file)
    return model_file.resolve().parent.name if model_file.stem == "model" else model_file.stem
