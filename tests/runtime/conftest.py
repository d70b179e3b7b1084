"""Fixtures of the runtime tests: the runtime built once per session, and a few hand-made packages."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import (
    EMBED_KERNELS,
    MLP_KERNELS,
    THREADS_KERNELS,
    embed_program,
    mlp_program,
    mlp_weights,
    threads_program,
    write_test_package,
)

REPO = Path(__file__).resolve().parents[2]
# Another build folder (say a sanitizer build, configured beforehand) can be tested with AOTPACK_TEST_BUILD.
BUILD = Path(os.environ.get("AOTPACK_TEST_BUILD", REPO / "build" / "runtime")).resolve()


@pytest.fixture(scope="session")
def runtime_build() -> Path:
    """build/runtime with libaotpack.so and aotpack-run, configured if needed and brought up to date."""
    if not (BUILD / "CMakeCache.txt").exists():  # configure once; later sessions only rebuild
        subprocess.run(
            ["cmake", "-S", str(REPO / "runtime_cpp"), "-B", str(BUILD), "-DCMAKE_BUILD_TYPE=Release"],
            check=True,
            capture_output=True,
        )
    subprocess.run(["cmake", "--build", str(BUILD), "-j2"], check=True, capture_output=True)
    # The tests use this build, never an older copy installed in the environment.
    os.environ["AOTPACK_RUNTIME_LIB"] = str(BUILD / "libaotpack.so")
    return BUILD


@pytest.fixture(scope="session")
def rt(runtime_build):
    from aotpack import runtime

    return runtime


@pytest.fixture(scope="session")
def packages_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("packages")


@pytest.fixture(scope="session")
def mlp_weights_np() -> dict[str, np.ndarray]:
    return mlp_weights(np.random.default_rng(0))


@pytest.fixture(scope="session")
def mlp_package(packages_dir, mlp_weights_np) -> Path:
    return write_test_package(packages_dir / "mlp.aotpack", mlp_program(), MLP_KERNELS, mlp_weights_np)


@pytest.fixture(scope="session")
def embed_table() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)


@pytest.fixture(scope="session")
def embed_package(packages_dir, embed_table) -> Path:
    return write_test_package(
        packages_dir / "embed.aotpack", embed_program(), EMBED_KERNELS, {"table": embed_table}
    )


@pytest.fixture(scope="session")
def threads_package(packages_dir) -> Path:
    return write_test_package(packages_dir / "threads.aotpack", threads_program(), THREADS_KERNELS, {})
