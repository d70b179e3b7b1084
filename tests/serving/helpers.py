"""Helpers shared by the serving tests (a module of the tests/serving package, so that its name does not
clash with other folders' conftest modules)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
AOTPACK = [sys.executable, "-m", "aotpack.cli"]
MODELS = Path(__file__).resolve().parent / "models"


def cli(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([*AOTPACK, *args], capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr
    return result
