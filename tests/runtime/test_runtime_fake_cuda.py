"""The CUDA backend's mechanics on a machine without a GPU: runs against the stand-in driver of
runtime_cpp/tests/fake_cuda (device memory is host memory, kernels do nothing), so what is checked is what the
runtime asks of the driver, not what kernels compute: the calls of a run in order, no allocation in a run,
the checks of device pointers and the messages of failed launches. tests/gpu runs the real thing.

Each case runs in a subprocess with LD_LIBRARY_PATH naming the fake, so this process never loads a driver."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch
from aotpack.build import build_package
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.decompositions import decompositions
from aotpack.lowering.targets import CpuTarget, CudaTarget, Targets
from torch import nn

pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)).softmax(-1)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """Small exported for cpu and cuda sm_90 (the fake is a 9.0 device): (path, number of cuda steps)."""
    tmp = tmp_path_factory.mktemp("fake_cuda")
    torch.manual_seed(0)
    spec = ModelSpec(tmp / "model.py", Small().eval(), (torch.randn(3, 8),), ("x",), {"x": {0: "n"}}, {"n": (1, 16)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    result = build_package(captured, tmp / "small.aotpack", targets=Targets(CpuTarget("x86-64-v3"), CudaTarget((90,))))
    with zipfile.ZipFile(result.path) as z:
        steps = len(json.loads(z.read("program.json"))["cuda"]["steps"])
    return result.path, steps


def fake_env(runtime_build, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_CUDA_")}
    env.update(LD_LIBRARY_PATH=str(runtime_build / "fake_cuda"), **extra)
    return env


def run_python(runtime_build, code: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=fake_env(runtime_build, **extra),
    )


@pytest.mark.parametrize("io", ["host", "device"])
def test_a_cuda_run_allocates_nothing(runtime_build, package, io):
    result = subprocess.run(
        [str(runtime_build / "aotpack-alloc-test"), str(package[0]), "--device", "cuda", "--io", io],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=fake_env(runtime_build),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The fake driver allocates nothing in a run either, so here even the C count is exact.
    assert re.search(r"15 runs after the warm-up: 0 C\+\+ allocations, (0 C allocations|C allocations not counted)",
                     result.stdout), result.stdout


def test_the_driver_calls_of_a_host_io_run(runtime_build, package, tmp_path):
    path, steps = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        f"""
        import numpy as np
        from aotpack import runtime as rt
        session = rt.Model({str(path)!r}).session(device="cuda")
        for n in (5, 16):
            (out,) = session.run([np.zeros((n, 8), np.float32)])
            assert out.shape == (n, 4), out.shape
        """,
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr
    lines = trace.read_text().splitlines()
    first_run = lines.index("cuCtxSetCurrent(primary)", lines.index("cuStreamCreate(1)") + 1)
    ends = [i + 1 for i, line in enumerate(lines) if line == "cuStreamSynchronize"]
    assert len(ends) == 2, lines
    runs = [lines[first_run : ends[0]], lines[ends[0] : ends[1]]]
    for n, run in zip((5, 16), runs):
        calls = [line.split("(")[0] for line in run]
        assert calls == (
            ["cuCtxSetCurrent", "cuMemcpyHtoDAsync", "cuMemsetD8Async"]
            + ["cuLaunchKernel"] * steps
            + ["cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync", "cuStreamSynchronize"]
        ), run
        assert run[1].endswith(f", {n * 8 * 4})") and run[-3].endswith(f", {n * 4 * 4})"), run
        assert run[2].endswith(f", 0, {4 * steps})") and run[-2].endswith(f", {4 * steps})"), run


def test_device_pointers_are_checked(runtime_build, package):
    result = run_python(
        runtime_build,
        f"""
        import ctypes
        import numpy as np
        from aotpack import runtime as rt
        cuda = ctypes.CDLL("libcuda.so.1")

        class Dev:  # what a device-I/O session reads of a torch CUDA tensor
            device = type("Device", (), {{"type": "cuda"}})()
            dtype = "float32"
            def __init__(self, ptr, shape):
                self.ptr, self.shape = ptr, shape
            def data_ptr(self):
                return self.ptr
            def is_contiguous(self):
                return True

        def alloc(n):
            p = ctypes.c_ulonglong(0)
            assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
            return p.value

        session = rt.Model({str(package[0])!r}).session(device="cuda", io="device")
        assert session.io == "device"
        big = alloc(16 * 8 * 4)
        for n, offset in ((3, 0), (16, 0), (1, 128)):
            (out,) = session.run([Dev(big + offset, (n, 8))])
            assert out.shape == (n, 4)
        host = np.zeros((3, 8), np.float32)
        for ptr in (big + 4, alloc(64), host.ctypes.data):
            try:
                session.run([Dev(ptr, (3, 8))])
            except rt.AotpackError as e:
                print(e)
        """,
    )
    assert result.returncode == 0, result.stderr
    messages = result.stdout.splitlines()
    assert len(messages) == 3, result.stdout
    assert "is not 16-byte aligned, which the CUDA kernels assume" in messages[0]
    assert "is 64 bytes before the end of its allocation, too few for the tensor's 96 bytes" in messages[1]
    assert "is not memory the CUDA driver knows (a host pointer?)" in messages[2]
    assert all(m.startswith('input "x": device pointer 0x') for m in messages), messages


@pytest.mark.parametrize(
    "fail,message",
    [
        ({"FAKE_CUDA_FAIL_LAUNCH": "1"}, "launching cuda step 0 (kernel "),
        ({"FAKE_CUDA_FAIL_SYNC": "1"}, "running the model on CUDA device 0 (Fake GPU, compute capability 9.0) failed"),
    ],
)
def test_driver_failures_are_reported(runtime_build, package, fail, message):
    result = subprocess.run(
        [str(runtime_build / "aotpack-run"), str(package[0]), "--device", "cuda"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=fake_env(runtime_build, **fail),
    )
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "CUDA_ERROR_FAKE (700: fake driver error)" in result.stderr, result.stderr


def test_a_device_the_host_lacks(runtime_build, package):
    result = subprocess.run(
        [str(runtime_build / "aotpack-run"), str(package[0]), "--device", "cuda:1"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=fake_env(runtime_build),
    )
    assert result.returncode == 1 and "CUDA device 1 does not exist: this host has 1 CUDA device" in result.stderr
