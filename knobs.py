"""Every setting aotpack reads from the environment, typed, in one place."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where compiled kernel libraries are cached by source hash (AOTPACK_CACHE_DIR)."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "aotpack"
    return Path(os.environ.get("AOTPACK_CACHE_DIR", default))


def cxx() -> str:
    """The C++ compiler used at export for CPU kernels (AOTPACK_CXX, else CXX, else g++)."""
    return os.environ.get("AOTPACK_CXX") or os.environ.get("CXX") or "g++"


def cpu_isa() -> str:
    """The x86-64 level CPU kernels are compiled for (AOTPACK_CPU_ISA): x86-64-v2, -v3 (default) or -v4."""
    return os.environ.get("AOTPACK_CPU_ISA", "x86-64-v3")


def runtime_lib() -> str | None:
    """An explicit path to libaotpack.so for the Python binding (AOTPACK_RUNTIME_LIB)."""
    return os.environ.get("AOTPACK_RUNTIME_LIB") or None


def compile_jobs() -> int:
    """Processes that compile Triton kernels at export (AOTPACK_COMPILE_JOBS; default: one per core). Set 1
    where exports already run in parallel (pytest -n), so each does not start a pool of its own."""
    value = os.environ.get("AOTPACK_COMPILE_JOBS")
    return max(1, int(value)) if value and value.isdigit() else (os.cpu_count() or 1)


def test_perturb() -> float | None:
    """Test hook only (AOTPACK_TEST_PERTURB=FACTOR): scale one kernel's output, making the package wrong on
    purpose so tests can see verification fail (lowering/perturb.py)."""
    value = os.environ.get("AOTPACK_TEST_PERTURB")
    return float(value) if value else None
