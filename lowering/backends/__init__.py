"""One compiler backend per target kind, behind the interface in interface.py."""

from __future__ import annotations

from ..targets import Targets
from .cpu.backend import CpuBackend
from .cuda.backend import CudaBackend
from .interface import Artifacts, Backend

BACKENDS: dict[str, type[Backend]] = {b.kind: b for b in (CpuBackend, CudaBackend)}


def backends_for(targets: Targets) -> tuple[Backend, ...]:
    """The backends of a package's targets, in the order their members and sections are written."""
    return tuple(BACKENDS[target.kind](target) for target in targets.all)


__all__ = ["BACKENDS", "Artifacts", "Backend", "backends_for"]
