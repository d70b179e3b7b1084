"""Export a module for CUDA through the public API (verification on, as users run it) and compare the runtime's
CUDA outputs with PyTorch by the rule export uses (aotpack.verification.judge)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aotpack
import numpy as np
import pytest
import torch
from aotpack.errors import CaptureError
from aotpack.exporter import ModelSpec
from aotpack.verification import HALF_DTYPES, as_reference, from_runtime, judge, mismatch_report, to_numpy

HERE = Path(__file__).resolve()


def export_cuda(spec: ModelSpec, path: Path, arch: int, cpu: bool = False) -> Any:
    """`spec` as aotpack.export takes it: the model, its examples, {input: {axis: symbol}} and the ranges."""
    return aotpack.export(spec.model, spec.example_inputs, path, dynamic_shapes=dict(spec.dynamic_axes) or None,
                          ranges=dict(spec.dynamic_ranges), target="cpu,cuda" if cpu else "cuda", cuda_arch=(arch,))


@contextlib.contextmanager
def skipped_where_this_torch_specialises() -> Iterator[None]:
    """torch 2.11 (the GPU image's) specialises sizes that torch 2.13 keeps symbolic: stride-2 pooling over a
    dynamic dim guards the dim's parity (an H200 run: op_models/conv3d.py, large_windows.py). aotpack refuses
    such a capture with torch's guard; under an older torch that refusal is skipped here, naming it, not
    counted as a pass or a failure."""
    try:
        yield
    except CaptureError as e:
        major, minor = (int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
        if (major, minor) < (2, 13) and str(e).startswith("cannot keep"):
            pytest.skip(f"torch {torch.__version__} specialises this model's sizes (2.13 does not): {e}")
        raise


def compare(outputs: list[np.ndarray], expected: list[torch.Tensor], signature: dict[str, Any], where: str,
            half: list[torch.Tensor] | None = None) -> list[float]:
    """`expected`: PyTorch's outputs in float32 (for a half-precision package, the model run in float32);
    `half`: the model run in its half type, the noise floor, needed for half-precision outputs."""
    errors = []
    for i, (info, out, ref) in enumerate(zip(signature["outputs"], outputs, expected)):
        ref = ref.detach().cpu()
        if ref.is_floating_point():
            noise = None
            if info["dtype"] in HALF_DTYPES:
                assert half is not None, f"{where}: a {info['dtype']} output needs the half-precision model's outputs"
                noise = as_reference(half[i])
            j = judge(info["name"], info["dtype"], from_runtime(out, getattr(torch, info["dtype"])),
                      as_reference(ref), noise)
            assert j.passed, f"{where}: {j.explain()}"
            errors.append(j.error)
        else:
            ref_np = to_numpy(ref)
            assert out.shape == ref_np.shape and (out == ref_np).all(), f"{where}: " + mismatch_report(
                info["name"], out, ref_np)
            errors.append(0.0)
    return errors
