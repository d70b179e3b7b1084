"""The promise that a run allocates nothing, on the CPU backend: aotpack-alloc-test (runtime_cpp/tests/
alloc_test.cpp) counts every allocation of the process over runs at the symbols' minima, an inner point and
maxima after a warm-up run. tests/e2e/test_allocations.py does the same with exported models' kernels, and
tests/gpu/test_gpu_allocations.py on CUDA."""

from __future__ import annotations

import re
import subprocess

import pytest

# A sanitizer build (AOTPACK_TEST_BUILD) counts only C++ allocations: its malloc is its own.
NO_ALLOCATION = re.compile(r"15 runs after the warm-up: 0 C\+\+ allocations, (0 C allocations|C allocations not counted)")


def alloc_test(build, package, *args):
    return subprocess.run(
        [str(build / "aotpack-alloc-test"), str(package), *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("name", ["mlp_package", "embed_package"])
def test_a_cpu_run_allocates_nothing(runtime_build, request, name, threads):
    package = request.getfixturevalue(name)
    result = alloc_test(runtime_build, package, "--threads", threads)
    assert result.returncode == 0, result.stdout + result.stderr
    assert NO_ALLOCATION.search(result.stdout), result.stdout


def test_the_count_includes_the_kernels_and_the_pool_threads(runtime_build, threads_package):
    """threads_package's kernel records each thread id in a std::set from inside parallel_for: the counting
    operator new must see those allocations, made in the dlopen'ed kernel library on pool threads."""
    result = alloc_test(runtime_build, threads_package, "--threads", 4)
    assert result.returncode == 1 and "FAILED: a run allocated" in result.stdout, result.stdout + result.stderr
    assert " 0 C++ allocations" not in result.stdout, result.stdout


def test_usage_errors(runtime_build, mlp_package):
    assert alloc_test(runtime_build, mlp_package, "--io", "device").returncode == 2
    assert alloc_test(runtime_build, mlp_package, "--threads", "0").returncode == 2
    assert alloc_test(runtime_build, mlp_package, "--frobnicate").returncode == 2
