"""3-d convolutions and pooling (tests/e2e/op_models/conv3d.py) in Triton's interpreter against eager: the
implicit-GEMM products over kd * kh * kw taps (a patch embedding, a transposed convolution as a direct one)
the separable poolings and max pooling's indices, at the example shape and at the corners of the declared ranges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")

from test_triton_compile import INTERPRET

HERE = Path(__file__).resolve().parent
MODEL = HERE.parent / "e2e" / "op_models" / "conv3d.py"

# INTERPRET's program, at the smallest and largest declared sizes of every dynamic dim instead of the example's.
AT_RANGES = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from triton_interp import run_program
from aotpack.build import capture_model_file
from aotpack.lowering.stages import lower
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.verification import relative_error
captured = capture_model_file(sys.argv[2])
program = lower(captured)
library = render_triton_library(program)
model = captured.program.module()
report = {}
for corner in ("min", "max"):
    sizes = {s.name: getattr(s, corner) for s in program.symbols}
    torch.manual_seed(len(report))
    inputs = []
    for spec in program.inputs:
        shape = [sizes[str(d)] if not d.is_number else int(d) for d in program.buffers[spec].shape]
        inputs.append(torch.randn(shape))
    with torch.no_grad():
        ref = model(*inputs)
    outs, errors = run_program(program, library, inputs)
    report[corner] = {"sizes": sizes, "errors": errors,
                      "rel": [relative_error(o.float().numpy(), r.float().numpy()) for o, r in zip(outs, ref)]}
print(json.dumps(report))
"""


def _run(script: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # must be set before anything imports Triton
    result = subprocess.run([sys.executable, "-c", script, str(HERE), str(MODEL)],
                            check=False, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_3d_convolutions_and_pooling_match_eager_in_the_triton_interpreter():
    report = _run(INTERPRET)
    assert not report["errors"] and len(report["rel"]) == 19 and all(r <= 1e-5 for r in report["rel"]), report


def test_3d_convolutions_and_pooling_match_eager_in_the_triton_interpreter_over_the_ranges():
    report = _run(AT_RANGES)
    for run in report.values():
        assert not run["errors"] and len(run["rel"]) == 19 and all(r <= 1e-5 for r in run["rel"]), report
