"""The scatter kernels' Triton form (templates/triton/scatter.py.jinja) against eager, in Triton's interpreter:
folds over repeated targets (integers exactly), assignments, masks, and sorting built on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")

HERE = Path(__file__).resolve().parent

SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from triton_interp import run_program
from aotpack.exporter import ModelSpec, capture
from aotpack.lowering.frontend import ops  # noqa: F401  (registers the lowerings)
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering

class Model(torch.nn.Module):
    def forward(self, x, i, k):
        return (x.scatter_add(0, i, x), x.scatter_reduce(0, i, x * 2, "amax", include_self=False),
                torch.index_put(x, (i[:, 0],), x, accumulate=True), x.index_fill(1, i[0, :2], -1.0),
                k.scatter_reduce(1, i.T, k, "mean"), x.masked_scatter(x > 0, x.flip(0)),
                *torch.sort(k, 1, descending=True))

torch.manual_seed(0)
x = torch.randn(6, 4)
x[2, 1] = float("nan")
inputs = (x, torch.randint(0, 4, (6, 4)), torch.randint(-3, 3, (4, 6)))
spec = ModelSpec(Path(sys.argv[1]) / "test_triton_scatter.py", Model(), inputs, ("x", "i", "k"), {}, {})
program = GraphLowering(capture(spec, (), None, decompositions())).run()
outs, errors = run_program(program, render_triton_library(program), list(inputs))
refs = Model()(*inputs)
same = [bool(torch.equal(o.to(r.dtype), r) if not r.is_floating_point() else torch.allclose(o, r, equal_nan=True))
        for o, r in zip(outs, refs)]
print(json.dumps({"errors": errors, "same": same}))
"""


def test_scatter_kernels_match_eager_in_the_triton_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # must be set before anything imports Triton
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(HERE)], env=env, capture_output=True, text=True, check=False,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["errors"] and all(report["same"]), report
