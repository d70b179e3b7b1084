"""grid_sample's Triton kernels in Triton's interpreter (on the CPU) against eager: the gathers with positions
from data, their clamps and masks, as the CUDA backend renders them from the IR the C++ backend also takes."""

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
REPO = HERE.parents[1]

# Every interpolation x padding x align_corners combination (tests/e2e/test_grid_sample.py's AllModes) on its
# adversarial grids (ties, far outside, 1e10, infinities, NaN), with single-pixel and larger inputs.
ADVERSARIAL = r"""
import json, sys, numpy as np, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from test_grid_sample import HERE, AllModes, COMBOS, adversarial_grid
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.stages import lower
from aotpack.verification import relative_error
spec = ModelSpec(HERE, AllModes().eval(), (torch.randn(2, 3, 4, 5), adversarial_grid(2, 4, 5, 0)), ("x", "grid"),
                 {"x": {0: "batch", 2: "h", 3: "w"}, "grid": {0: "batch", 1: "ho", 2: "wo"}},
                 {"batch": (1, 2), "h": (1, 7), "w": (1, 7), "ho": (1, 64), "wo": (1, 64)})
plan = resolve_symbols(spec)
program = lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))
library = render_triton_library(program)
report = {}
for seed, (n, h, w) in enumerate([(1, 1, 1), (2, 4, 7)]):
    gen = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(n, 3, h, w, generator=gen) * 4 + 1, adversarial_grid(n, h, w, seed)]
    with torch.no_grad():
        ref = [r.numpy() for r in spec.model(*inputs)]
    outs, errors = run_program(program, library, inputs)
    for (mode, padding, align), out, r in zip(COMBOS, outs, ref):
        out = out.numpy()
        nan = np.isnan(r)
        same_nan = bool((np.isnan(out) == nan).all())
        rel = relative_error(out[~nan], r[~nan]) if same_nan else float("inf")
        exact = bool((out[~nan] == r[~nan]).all()) if same_nan else False
        report[f"{mode} {padding} {align} {h}x{w}"] = [errors, same_nan, rel, exact]
print(json.dumps(report))
"""


def _run(program: str, *args: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # must be set before anything imports Triton
    result = subprocess.run([sys.executable, "-c", program, *args], check=False, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_grid_sample_model_matches_eager_in_the_triton_interpreter():
    """op_models/grid_sample.py: an affine spatial transformer, flow warps and bicubic sampling."""
    report = _run(INTERPRET, str(HERE), str(REPO / "tests/e2e/op_models/grid_sample.py"))
    assert not report["errors"] and len(report["rel"]) == 5 and all(r <= 1e-5 for r in report["rel"]), report


def test_adversarial_grids_match_eager_in_the_triton_interpreter():
    report = _run(ADVERSARIAL, str(HERE), str(REPO / "tests/e2e"))
    assert len(report) == 36, report
    for name, (errors, same_nan, rel, exact) in report.items():
        assert not errors and same_nan and rel <= 1e-5, (name, report[name])
        assert exact or not name.startswith("nearest"), (name, report[name])
