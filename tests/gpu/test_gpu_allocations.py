"""A CUDA run allocates nothing: aotpack-alloc-test (runtime_cpp/tests/alloc_test.cpp) counts every C++
allocation of the process over runs at the symbols' minima, an inner point and maxima, after a warm-up run at
each (which records its CUDA graph), with host and with device I/O, with graphs and without. The C allocations it also counts include the NVIDIA driver's own: reported in
the output, not failed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from aotpack.build import build_package
from aotpack.exporter import capture, load_model_file, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.targets import CudaTarget, Targets

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module", params=["transformer_block", "gpt2"])
def cuda_package(request, tmp_path_factory, cuda_arch) -> Path:
    spec = load_model_file(EXAMPLES / request.param / "model.py")
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    path = tmp_path_factory.mktemp(request.param) / f"{request.param}.aotpack"
    return build_package(captured, path, targets=Targets(None, CudaTarget((cuda_arch,)))).path


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "no_graphs"])
@pytest.mark.parametrize("io", ["host", "device"])
def test_a_cuda_run_allocates_nothing(runtime_build, cuda_package, io, graphs):
    """With graphs, the warm-up runs record each point's graph; the counted runs replay them."""
    result = subprocess.run(
        [str(runtime_build / "aotpack-alloc-test"), str(cuda_package), "--device", "cuda", "--io", io]
        + ([] if graphs else ["--no-cuda-graphs"]),
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(result.stdout)  # the C allocation count, for the record
    assert result.returncode == 0, result.stdout + result.stderr
    assert "15 runs after the warm-up: 0 C++ allocations" in result.stdout, result.stdout
