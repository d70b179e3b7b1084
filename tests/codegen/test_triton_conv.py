"""Convolution as implicit GEMM in Triton: the matmul template loads the columns' tiles by evaluating their
expression (GatheredOperand), run in Triton's interpreter against eager PyTorch on a machine with no GPU.

The models are tests/e2e/test_implicit_gemm.py's: stride, padding and dilation unequal per dim, groups, a
1x1 convolution of a lazy input and conv1d, with dynamic batch and width; in float32 and float16, and once
more with every matmul operand an expression the template cannot split (both operands gathered). The
interpreter gets tl.dot of bfloat16 tiles wrong (a plain bfloat16 nn.Linear too), so bfloat16 is only
cross-compiled here; tests/gpu and the C++ runtime (tests/e2e) run it.
"""

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
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from test_implicit_gemm import assert_implicit, convs_inputs, convs_spec, lower, unsplittable_operands
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.verification import relative_error
dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
report = {}
for case in sys.argv[3].split(","):
    dtype = dtypes[case.split("-")[0]]
    spec = convs_spec(None if dtype == torch.float32 else dtype)
    program = lower(spec)
    assert_implicit(program)
    if case.endswith("-unsplit"):
        program = unsplittable_operands(program)
    library = render_triton_library(program)
    assert ("b_fixed" in library.source) != case.endswith("-unsplit")
    model = spec.model.float()
    for batch, width in ((1, 6), (3, 20)):
        inputs = convs_inputs(batch, width, dtype)
        with torch.no_grad():  # float32 reference on the same (rounded) weights and inputs
            expected = model(*[x.float() for x in inputs])
        outs, errors = run_program(program, library, inputs)
        report[f"{case} batch {batch} width {width}"] = (
            errors, [relative_error(o.float().numpy(), r.numpy()) for o, r in zip(outs, expected)])
print(json.dumps(report))
"""


@pytest.mark.parametrize("cases, tolerance", [
    ("float32,float32-unsplit", 1e-5),
    ("float16", 1e-2),
])
def test_convolution_implicit_gemm_matches_eager_in_the_triton_interpreter(cases, tolerance):
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # must be set before anything imports Triton
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(HERE), str(HERE.parent / "e2e"), cases],
                            check=False, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(report) == 2 * len(cases.split(","))
    assert all(not errors and max(rels) <= tolerance for errors, rels in report.values()), report


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_convolution_implicit_gemm_compiles_to_cubins(dtype, tmp_path, monkeypatch):
    """The interpreter is lax about types, the compiler is not: split and unsplit gathered operands."""
    import torch
    from aotpack.lowering.backends.cuda.compile import compile_triton_library
    from aotpack.lowering.backends.cuda.render import render_triton_library

    sys.path.insert(0, str(HERE.parent / "e2e"))
    from test_implicit_gemm import convs_spec, lower, unsplittable_operands

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    torch_dtype = getattr(torch, dtype)
    program = lower(convs_spec(None if torch_dtype == torch.float32 else torch_dtype))
    for variant in (program, unsplittable_operands(program)):
        library = render_triton_library(variant)
        compiled = compile_triton_library(library, (80, 90))
        assert all(set(c.kernels) == {k.name for k in library.kernels} for c in compiled.values())
