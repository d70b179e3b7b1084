"""The backend's C++ unit tests (runtime_cpp/triton/tests/triton_unit_tests.cpp): its JSON model and the model
configuration's completion and checks, without a server."""

from __future__ import annotations

import subprocess


def test_backend_unit_tests_pass(runtime_build):
    result = subprocess.run([str(runtime_build / "aotpack-triton-unit-tests")], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all backend unit tests passed" in result.stdout
