"""What a package is built for: frozen target descriptors, parsed once from the CLI's --target/--cuda-arch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import AotpackError


class TargetError(AotpackError):
    pass


@dataclass(frozen=True)
class CpuTarget:
    kind: ClassVar[str] = "cpu"  # the key of its compiler backend (lowering/backends/)
    isa: str  # an x86-64 micro-architecture level, e.g. "x86-64-v3"


@dataclass(frozen=True)
class CudaTarget:
    kind: ClassVar[str] = "cuda"
    archs: tuple[int, ...]  # compute capabilities as 10 * major + minor, e.g. (80, 90)
    tune: bool = False  # time kernel configurations on the local GPU (backends/cuda/tuning.py), else the tables


@dataclass(frozen=True)
class Targets:
    cpu: CpuTarget | None
    cuda: CudaTarget | None

    @property
    def all(self) -> tuple[CpuTarget | CudaTarget, ...]:
        """The package's targets, CPU first: the order of their steps, sections and members in the package."""
        return tuple(t for t in (self.cpu, self.cuda) if t is not None)


def local_cuda_arch() -> int | None:
    """The compute capability of this machine's first GPU, if torch sees one."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return major * 10 + minor
    except Exception:  # a broken CUDA install must not break a CPU export
        return None
    return None


def parse_targets(spec: str, cuda_archs: str | None, isa: str, tune: bool | None = None) -> Targets:
    """`--target cpu`, `cuda` or `cpu,cuda`; `--cuda-arch 80,90` (default: the local GPU's, else 90);
    `--tune`/`--no-tune` (default: tune when the local GPU is of the newest target architecture, the one
    configurations are chosen for)."""
    kinds = [k.strip() for k in spec.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in ("cpu", "cuda")]
    if unknown or not kinds:
        raise TargetError(f"--target {spec!r}: expected cpu, cuda or cpu,cuda")
    cuda = None
    if "cuda" in kinds:
        if cuda_archs:
            try:
                archs = tuple(sorted({int(a.strip().removeprefix("sm_")) for a in cuda_archs.split(",") if a.strip()}))
            except ValueError:
                raise TargetError(f"--cuda-arch {cuda_archs!r}: expected compute capabilities like 80,90") from None
            if not archs or any(a < 70 or a > 200 for a in archs):
                raise TargetError(f"--cuda-arch {cuda_archs!r}: expected compute capabilities like 80,90 (7.0 or later)")
        else:
            archs = (local_cuda_arch() or 90,)
        cuda = CudaTarget(archs, _tune(tune, max(archs)))
    elif cuda_archs:
        raise TargetError("--cuda-arch needs --target cuda (or cpu,cuda)")
    elif tune:
        raise TargetError("--tune times CUDA kernels: it needs --target cuda (or cpu,cuda)")
    return Targets(CpuTarget(isa) if "cpu" in kinds else None, cuda)


def _tune(tune: bool | None, arch: int) -> bool:
    local = local_cuda_arch() if tune is not False else None
    if tune and local != arch:
        where = f"this machine's GPU is sm_{local}" if local else "this machine has no GPU that torch can use"
        raise TargetError(f"--tune times kernels on the local GPU, but {where} and the package's configurations "
                          f"are chosen for sm_{arch}; export on a machine with that GPU, or leave --tune off to "
                          "use the configuration tables")
    return local == arch
