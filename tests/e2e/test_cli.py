"""The command line as users run it: `aotpack export`, `inspect`, `verify`, then `aotpack-run` alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AOTPACK = [sys.executable, "-m", "aotpack.cli"]


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO, **kwargs)


@pytest.fixture(scope="module")
def mlp_package(tmp_path_factory, runtime_build) -> Path:
    path = tmp_path_factory.mktemp("cli") / "mlp.aotpack"
    result = run([*AOTPACK, "export", "examples/mlp/model.py", "--dynamic", "batch=1..64", "-o", str(path)])
    assert result.returncode == 0, result.stderr
    assert "verified at 4 point(s) on cpu" in result.stderr and "batch=1..64" in result.stderr
    return path


def test_demo_flow_export_run_compare(mlp_package, runtime_build, tmp_path):
    inputs, outputs = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    made = run([sys.executable, "examples/compare.py", "inputs", "examples/mlp/model.py", str(inputs), "input=5,32"])
    assert made.returncode == 0, made.stderr
    ran = run([str(runtime_build / "aotpack-run"), str(mlp_package), "--inputs", str(inputs), "--outputs", str(outputs),
               "--device", "cpu"])
    assert ran.returncode == 0, ran.stderr
    assert 'output "output": float32 [5, 10]' in ran.stdout
    checked = run([sys.executable, "examples/compare.py", "check", "examples/mlp/model.py", str(inputs), str(outputs)])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "relative error vs eager PyTorch" in checked.stdout


def test_inspect_shows_signature_sizes_and_kernels(mlp_package):
    result = run([*AOTPACK, "inspect", str(mlp_package)])
    assert result.returncode == 0, result.stderr
    for expected in ("mlp 0.1.0", "batch in 1..64", "input: float32[batch, 32]", "output: float32[batch, 10]",
                     "weights:", "arena:", "kernels:"):
        assert expected in result.stdout


def test_verify_reports_a_corrupt_member(mlp_package, tmp_path):
    assert run([*AOTPACK, "verify", str(mlp_package)]).returncode == 0
    data = bytearray(mlp_package.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "bad.aotpack"
    bad.write_bytes(bytes(data))
    result = run([*AOTPACK, "verify", str(bad)])
    assert result.returncode == 1 and "does not match its sha256" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["export", "examples/nope/model.py"], "examples/nope/model.py: no such file"),
    (["export", "examples/mlp/model.py", "--dynamic", "batch=1-64"], "expected NAME=MIN..MAX"),
    (["export", "examples/mlp/model.py", "--dynamic", "batch=9..3"], "batch"),
    (["export", "examples/mlp/model.py", "--dynamic", "seq=1..8"], "symbol seq has a range but is bound to no input axis"),
    (["export", "examples/mlp/model.py", "--dump", "nonsense"], "no such stage"),
])
def test_user_errors_are_one_line_without_traceback(args, message, tmp_path):
    result = run([*AOTPACK, *args, "-o", str(tmp_path / "x.aotpack")] if args[0] == "export" else [*AOTPACK, *args])
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert not (tmp_path / "x.aotpack").exists()
