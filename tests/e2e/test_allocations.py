"""A run allocates nothing with the kernels the compiler generates: examples exported through the real
pipeline, run by aotpack-alloc-test (runtime_cpp/tests/alloc_test.cpp) on 1 and 2 threads, with every
allocation of the process counted over runs at the symbols' minima, an inner point and maxima."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from exported import export

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module", params=["mlp", "cnn", "transformer_block"])
def exported_example(request, tmp_path_factory):
    return export(EXAMPLES / request.param / "model.py", tmp_path_factory.mktemp(request.param))


@pytest.mark.parametrize("threads", [1, 2])
def test_an_exported_model_runs_without_allocating(runtime_build, exported_example, threads):
    result = subprocess.run(
        [str(runtime_build / "aotpack-alloc-test"), str(exported_example.result.path), "--threads", str(threads)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # A sanitizer build counts only C++ allocations (its malloc is its own).
    assert re.search(r"0 C\+\+ allocations, (0 C allocations|C allocations not counted)", result.stdout), result.stdout
