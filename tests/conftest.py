"""Fixtures shared by every test tier."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUNTIME_BUILD = REPO / "build" / "runtime"


@pytest.fixture(scope="session")
def runtime_build() -> Path:
    """build/runtime with libaotpack.so and aotpack-run, configured if needed and brought up to date."""
    if not (RUNTIME_BUILD / "CMakeCache.txt").exists():
        subprocess.run(["cmake", "-S", str(REPO / "runtime_cpp"), "-B", str(RUNTIME_BUILD),
                        "-DCMAKE_BUILD_TYPE=Release"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(RUNTIME_BUILD), "-j2"], check=True, capture_output=True)
    # The tests use this build, never an older copy installed in the environment.
    os.environ["AOTPACK_RUNTIME_LIB"] = str(RUNTIME_BUILD / "libaotpack.so")
    return RUNTIME_BUILD
