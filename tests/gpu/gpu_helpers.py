"""Export a module for CUDA and compare the runtime's CUDA outputs with eager PyTorch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from aotpack.build import build_package
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.targets import CpuTarget, CudaTarget, Targets
from aotpack.verification import TOLERANCE, from_runtime, mismatch_report, relative_error, to_numpy

HERE = Path(__file__).resolve()


def export_cuda(spec: ModelSpec, path: Path, arch: int, cpu: bool = False) -> Any:
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    targets = Targets(CpuTarget("x86-64-v3") if cpu else None, CudaTarget((arch,)))
    return build_package(captured, path, targets=targets)


def compare(outputs: list[np.ndarray], expected: list[torch.Tensor], signature: dict[str, Any], where: str) -> list[float]:
    errors = []
    for info, out, ref in zip(signature["outputs"], outputs, expected):
        ref = ref.detach().cpu()
        if ref.is_floating_point():
            ref_np = ref.float().numpy()
            got = from_runtime(out, ref.dtype)
            err = relative_error(got, ref_np)
            assert got.shape == ref_np.shape and err <= TOLERANCE[info["dtype"]], f"{where}: " + mismatch_report(
                info["name"], got, ref_np)
            errors.append(err)
        else:
            ref_np = to_numpy(ref)
            assert out.shape == ref_np.shape and (out == ref_np).all(), f"{where}: " + mismatch_report(
                info["name"], out, ref_np)
            errors.append(0.0)
    return errors
