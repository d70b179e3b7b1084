"""Runs a script in Triton's interpreter in a child process and returns the JSON report it prints last.

TRITON_INTERPRET must be set before Triton is imported, so the unit tests that compare programs in the
interpreter run their comparison as a script. The script finds tests/codegen (triton_interp.py) and this
folder (the test modules' models) at the front of sys.argv[1:] (`sys.path[:0] = [sys.argv[1], sys.argv[2]]`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def run_in_interpreter(script: str) -> dict:
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", script, str(HERE.parent / "codegen"), str(HERE)], check=False,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
