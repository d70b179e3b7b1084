"""The CUDA side of the runtime as seen from a machine without a GPU: packages with CUDA kernels load, their
CPU part runs unchanged, and asking for CUDA fails with a status that says why (tests/gpu covers the GPU)."""

from __future__ import annotations

import ctypes
import json
import zipfile

import numpy as np
import pytest
import torch
from aotpack.build import build_package
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.targets import CpuTarget, CudaTarget, TargetError, Targets, parse_targets
from torch import nn

pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")


def _has_gpu() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)).softmax(-1)


def _export(tmp_path, targets: Targets):
    torch.manual_seed(0)
    spec = ModelSpec(tmp_path / "model.py", Small().eval(), (torch.randn(3, 8),), ("x",), {"x": {0: "n"}}, {"n": (1, 16)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    return spec, build_package(captured, tmp_path / "small.aotpack", targets=targets)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    return _export(tmp_path_factory.mktemp("both"), Targets(CpuTarget("x86-64-v3"), CudaTarget((80, 90))))


def test_cpu_cuda_package_layout(both):
    _, result = both
    manifest = result.manifest
    cuda = [t for t in manifest["targets"] if t["kind"] == "cuda"][0]
    assert cuda["archs"] == [80, 90] and cuda["min_driver_version"] in (12000, 13000) and cuda["ptx_version"]
    assert "triton" in manifest["producer"]
    with zipfile.ZipFile(result.path) as z:
        names = z.namelist()
        program = json.loads(z.read("program.json"))
        meta = json.loads(z.read("cuda/sm_90/kernels.json"))
    assert "cpu/x86-64-v3/kernels.so" in names and "cuda/kernels.py" in names
    assert len(program["cuda"]["steps"]) == len(program["steps"])
    for entry in meta["kernels"]:
        assert entry["cubin"] in names and entry["cubin"].startswith("cuda/sm_90/") and entry["num_warps"] >= 1
    for step in program["cuda"]["steps"]:
        assert len(step["grid"]) == 3


def test_cpu_part_of_a_cuda_package_runs_as_before(both, rt):
    spec, result = both
    x = torch.randn(5, 8)
    (out,) = rt.Model(result.path).session().run([x.numpy()])
    with torch.no_grad():
        np.testing.assert_allclose(out, spec.model(x).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(_has_gpu(), reason="this machine has an NVIDIA driver; tests/gpu covers it")
@pytest.mark.parametrize("io", ["host", "device"])
def test_cuda_session_without_a_driver_says_why(both, rt, io):
    _, result = both
    with pytest.raises(rt.AotpackError, match="libcuda.so.1") as e:
        rt.Model(result.path).session(device="cuda", io=io)
    assert e.value.code == rt.StatusCode.UNSUPPORTED


def test_cuda_only_package_refuses_the_cpu_cleanly(tmp_path, rt):
    _, result = _export(tmp_path, Targets(None, CudaTarget((90,))))
    assert [t["kind"] for t in result.manifest["targets"]] == ["cuda"]
    model = rt.Model(result.path)  # loads: the program and the CUDA plan are valid
    with pytest.raises(rt.AotpackError, match="no CPU kernels") as e:
        model.session()
    assert e.value.code == rt.StatusCode.UNSUPPORTED


def test_cpu_package_refuses_cuda(tmp_path, rt):
    _, result = _export(tmp_path, Targets(CpuTarget("x86-64-v3"), None))
    with pytest.raises(rt.AotpackError, match="no CUDA kernels"):
        rt.Model(result.path).session(device="cuda")


def test_bad_device_strings(both, rt):
    _, result = both
    with pytest.raises(rt.AotpackError, match="cuda:N"):
        rt.Model(result.path).session(device="gpu")


def test_target_parsing():
    assert parse_targets("cpu", None, "x86-64-v3") == Targets(CpuTarget("x86-64-v3"), None)
    assert parse_targets("cpu,cuda", "90,80", "x86-64-v3").cuda == CudaTarget((80, 90))
    assert parse_targets("cuda", "sm_90", "x86-64-v3").cpu is None
    for bad in [("tpu", None), ("cuda", "nine"), ("cpu", "90"), ("cuda", "5")]:
        with pytest.raises(TargetError):
            parse_targets(bad[0], bad[1], "x86-64-v3")
