"""The special functions (lowering/frontend/ops/special.py: eager's erfinv, ndtri, Bessel functions, digamma,
trigamma, erfcx, and frexp and nextafter from the bits) in Triton's interpreter against eager, on random values
and each function's edges: the same IR rule the C++ backend takes, as the CUDA backend spells it."""

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


def test_special_functions_match_eager_in_the_triton_interpreter():
    """op_models/special_functions.py: every output within 1e-5 of eager, NaN and infinities where eager has them
    (erfinv of tanh near +-1 is the loosest: the interpreter's tanh stands in for libdevice's)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # must be set before anything imports Triton
    result = subprocess.run([sys.executable, "-c", INTERPRET, str(HERE), str(REPO / "tests/e2e/op_models/special_functions.py")],
                            check=False, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["errors"] and len(report["rel"]) == 17 and all(r <= 1e-5 for r in report["rel"]), report


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_functions_compile_to_cubins_without_a_gpu(dtype, tmp_path, monkeypatch):
    """What the interpreter lets pass, ptxas must too: libdevice's float64 functions, the bit casts, the series."""
    import importlib.util

    import torch
    from aotpack.exporter import ModelSpec, capture
    from aotpack.lowering.backends.cuda.compile import compile_triton_library
    from aotpack.lowering.backends.cuda.render import render_triton_library
    from aotpack.lowering.frontend.decompositions import decompositions
    from aotpack.lowering.stages import lower

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    path = REPO / "tests/e2e/op_models/special_functions.py"
    module_spec = importlib.util.spec_from_file_location("special_functions", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    wide = getattr(torch, dtype)
    spec = ModelSpec(path, module.model().to(wide).eval(), (torch.randn(3, 40, dtype=wide),), ("x",), {}, {})
    library = render_triton_library(lower(capture(spec, (), None, decompositions())))
    compiled = compile_triton_library(library, (90,))
    assert set(compiled[90].kernels) == {k.name for k in library.kernels}
    assert all(k.cubin[:4] == b"\x7fELF" for k in compiled[90].kernels.values())
