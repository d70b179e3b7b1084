"""Packages exported through the real CLI, shared by the registry tests (one export per session)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
AOTPACK = [sys.executable, "-m", "aotpack.cli"]
MLP = REPO / "examples" / "mlp" / "model.py"


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO, check=False, **kwargs)


@pytest.fixture(scope="session")
def mlp_package(tmp_path_factory, runtime_build) -> Path:
    """examples/mlp at version 1.0.0, batch 1..64, with user metadata."""
    path = tmp_path_factory.mktemp("registry") / "mlp.aotpack"
    result = run([*AOTPACK, "export", str(MLP), "--dynamic", "batch=1..64", "--version", "1.0.0",
                  "--meta", "license=MIT", "--meta", "source.revision=0123abc", "-o", str(path)])
    assert result.returncode == 0, result.stderr
    assert "verified at" in result.stderr and "FAILED" not in result.stderr
    return path


def load_mlp():
    """A fresh eager instance of examples/mlp (the exported weights: the model file seeds them)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("registry_mlp", MLP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.model().eval()


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))
