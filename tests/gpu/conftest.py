"""GPU tests: the CUDA path end to end (export with Triton -> cubins -> C++ runtime on a CUDA device).

Skipped, with the reason, where there is no NVIDIA driver, no CUDA device or no Triton. Run them on a GPU
machine with `scripts/gpu_check.sh`.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))


def _cuda_device() -> tuple[int | None, str]:
    """(compute capability of device 0, "") or (None, why there is none)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return None, f"no NVIDIA driver (libcuda.so.1: {e})"
    if cuda.cuInit(0) != 0:
        return None, "cuInit failed: no usable CUDA device"
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return None, "the NVIDIA driver reports no CUDA device"
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, 0)
    cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, 0)
    try:
        import triton  # noqa: F401
    except ImportError:
        return None, "Triton is not installed (pip install 'aotpack[cuda]')"
    return major.value * 10 + minor.value, ""


@pytest.fixture(scope="session")
def cuda_arch() -> int:
    """The local GPU's compute capability; skips the test where there is no GPU."""
    arch, reason = _cuda_device()
    if arch is None:
        pytest.skip(f"GPU test skipped: {reason}")
    return arch


@pytest.fixture(scope="session")
def rt(runtime_build, cuda_arch):
    from aotpack import runtime

    return runtime
