"""Device-pointer I/O on CUDA (io_memory AOTPACK_MEMORY_DEVICE): torch CUDA tensors read in place, outputs left
in the session's device memory, and every bad pointer refused with a status instead of a fault."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from aotpack.exporter import ModelSpec
from gpu_helpers import HERE, compare, export_cuda
from torch import nn

CU_MEM_ATTACH_GLOBAL = 1


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 48)

    def forward(self, x):
        y = self.fc(x)
        return y, torch.relu(y).sum(-1)


class Embedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)

    def forward(self, x):
        return self.emb(x) * 2.0


def _export(module: nn.Module, example: torch.Tensor, path, arch: int):
    torch.manual_seed(0)
    spec = ModelSpec(HERE, module.eval(), (example,), ("x",), {"x": {0: "n"}}, {"n": (1, 300)})
    return spec, export_cuda(spec, path, arch)


@pytest.fixture(scope="module")
def linear(tmp_path_factory, cuda_arch):
    torch.manual_seed(0)
    return _export(TwoOutputs(), torch.randn(5, 16), tmp_path_factory.mktemp("io") / "linear.aotpack", cuda_arch)


@pytest.fixture
def sessions(linear, rt):
    """(host-I/O session, device-I/O session) of the linear package on device 0."""
    model = rt.Model(linear[1].path)
    return model.session(device="cuda"), model.session(device="cuda", io="device")


def _raw_run(rt, session, data: int | None, shape: tuple[int, ...], dtype: int = 0) -> None:
    """aotpack_session_run with one tensor whose data pointer is given as is. The session's stream waits for no
    other, so the work on torch's streams that wrote the data is finished first, as the C API asks."""
    torch.cuda.synchronize()
    dims = (ctypes.c_int64 * len(shape))(*shape)
    tensor = rt._Tensor(dtype, len(shape), dims, data)
    rt._check(rt.lib().aotpack_session_run(session._handle, ctypes.byref(tensor), 1))


def _refused(rt, session, data: int | None, shape: tuple[int, ...]) -> str:
    with pytest.raises(rt.AotpackError) as info:
        _raw_run(rt, session, data, shape)
    assert info.value.code == rt.StatusCode.INVALID_ARGUMENT
    return str(info.value)


def _libcuda() -> ctypes.CDLL:
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cuda.cuMemAllocManaged.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_uint]
    cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    cuda.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    return cuda


def test_device_io_matches_host_io_and_eager(linear, sessions, rt):
    spec, result = linear
    host, device = sessions
    assert (host.io, device.io) == ("host", "device")
    assert rt.lib().aotpack_session_io_memory(device._handle) == 1
    for n in (1, 2, 17, 300):
        torch.manual_seed(n)
        x = torch.randn(n, 16, device="cuda")
        expected = host.run([x.cpu().numpy()])
        outputs = device.run([x])
        assert len(outputs) == 2
        got = [o.to_torch() for o in outputs]
        for out, ref, tensor in zip(outputs, expected, got):
            assert out.shape == ref.shape and out.device == 0 and out.data != 0
            assert tensor.device == x.device and tensor.dtype == torch.float32
            np.testing.assert_array_equal(tensor.cpu().numpy(), ref)  # the same kernels on the same data
        with torch.no_grad():
            eager = spec.model(x.cpu())
        compare([t.cpu().numpy() for t in got], list(eager), result.manifest["signature"], f"n={n}")


def test_outputs_are_session_memory_until_the_next_run(sessions):
    _, device = sessions
    first, second = torch.randn(4, 16, device="cuda"), torch.randn(4, 16, device="cuda")
    out = device.run([first])[0]
    view = torch.as_tensor(out, device="cuda")  # __cuda_array_interface__: no copy
    copy = out.to_torch()
    again = device.run([second])[0]
    assert again.data == out.data  # the session's output buffer, reused
    assert torch.equal(view, again.to_torch())  # the view now shows the second run
    assert not torch.equal(copy, view)  # the copy kept the first


def test_device_outputs_through_the_c_api(sessions, rt):
    _, device = sessions
    x = torch.randn(3, 16, device="cuda")
    _raw_run(rt, device, x.data_ptr(), (3, 16))
    t = rt._Tensor()
    rt._check(rt.lib().aotpack_session_output(device._handle, 0, ctypes.byref(t)))
    assert (t.rank, t.shape[0], t.shape[1]) == (2, 3, 48)
    y = torch.empty(3, 48, device="cuda")
    torch.cuda.synchronize()
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuMemcpyDtoD_v2(ctypes.c_uint64(y.data_ptr()), ctypes.c_uint64(t.data), ctypes.c_size_t(3 * 48 * 4)) == 0
    assert torch.equal(y, device.run([x])[0].to_torch())


def test_bad_pointers_are_refused_and_the_session_survives(sessions, rt):
    host, device = sessions
    assert _refused(rt, device, None, (2, 16)) == 'input "x": data is NULL'

    base = torch.zeros(2 * 16 + 1, device="cuda")
    assert "is not 16-byte aligned" in _refused(rt, device, base.data_ptr() + 4, (2, 16))

    on_host = np.zeros((2, 16), np.float32)
    message = _refused(rt, device, on_host.ctypes.data, (2, 16))
    assert "is not memory the CUDA driver knows" in message and 'input "x"' in message

    pinned = torch.zeros(2, 16).pin_memory()
    assert "is host memory registered with CUDA" in _refused(rt, device, pinned.data_ptr(), (2, 16))

    cuda = _libcuda()
    small = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(small), 256) == 0
    try:
        assert "too few for the tensor's 19200 bytes" in _refused(rt, device, small.value, (300, 16))
    finally:
        cuda.cuMemFree_v2(small.value)

    x = torch.randn(5, 16, device="cuda")  # no fault happened: the context still works
    np.testing.assert_array_equal(device.run([x])[0].to_torch().cpu().numpy(), host.run([x.cpu().numpy()])[0])


def test_python_refuses_what_it_can_see(sessions, rt):
    _, device = sessions
    for value, message in [
        (torch.zeros(2, 16), "is on cpu"),
        (torch.zeros(16, 2, device="cuda").t(), "not contiguous"),
        (np.zeros((2, 16), np.float32), "takes CUDA tensors"),
        (torch.zeros(2, 16, device="cuda", dtype=torch.complex64), "complex64 has no aotpack dtype"),
    ]:
        with pytest.raises(rt.AotpackError, match=message):
            device.run([value])
    with pytest.raises(rt.AotpackError, match="not one array"):
        device.run(torch.zeros(2, 16, device="cuda"))
    with pytest.raises(rt.AotpackError, match="dtype is float64, expected float32"):
        device.run([torch.zeros(2, 16, device="cuda", dtype=torch.float64)])


def test_managed_memory_is_accepted(sessions, rt):
    host, device = sessions
    x = np.random.default_rng(0).standard_normal((7, 16)).astype(np.float32)
    cuda = _libcuda()
    managed = ctypes.c_uint64()
    assert cuda.cuMemAllocManaged(ctypes.byref(managed), x.nbytes, CU_MEM_ATTACH_GLOBAL) == 0
    try:
        assert cuda.cuMemcpyHtoD_v2(managed.value, x.ctypes.data, x.nbytes) == 0
        _raw_run(rt, device, managed.value, x.shape)
        t = rt._Tensor()
        rt._check(rt.lib().aotpack_session_output(device._handle, 0, ctypes.byref(t)))
        out = torch.as_tensor(rt.DeviceTensor("y", t.data, (7, 48), np.dtype(np.float32), 0), device="cuda")
        np.testing.assert_array_equal(out.cpu().numpy(), host.run([x])[0])
    finally:
        cuda.cuMemFree_v2(managed.value)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_memory_of_another_device_is_refused(sessions, rt):
    _, device = sessions
    with pytest.raises(rt.AotpackError, match="is memory of CUDA device 1, but the session runs on CUDA device 0"):
        device.run([torch.zeros(2, 16, device="cuda:1")])


def test_index_errors_are_reported_with_device_io(tmp_path, rt, cuda_arch):
    _, result = _export(Embedding(), torch.randint(0, 50, (4,)), tmp_path / "emb.aotpack", cuda_arch)
    session = rt.Model(result.path).session(device="cuda", io="device")
    with pytest.raises(rt.AotpackError, match="outside"):
        session.run([torch.tensor([1, 2, 99], device="cuda")])
    (out,) = session.run([torch.tensor([1, 2, 3], device="cuda")])
    assert out.shape == (3, 16) and out.to_torch().shape == (3, 16)


def test_bfloat16_device_io(tmp_path, rt, cuda_arch):
    _, result = _export(TwoOutputs().to(torch.bfloat16), torch.randn(5, 16).to(torch.bfloat16),
                        tmp_path / "bf16.aotpack", cuda_arch)
    model = rt.Model(result.path)
    x = torch.randn(9, 16, device="cuda").to(torch.bfloat16)
    expected = model.session(device="cuda").run([x.view(torch.int16).cpu().numpy().view(np.uint16)])
    outputs = model.session(device="cuda", io="device").run([x])  # a temporary: its outputs keep it alive
    for out, ref in zip(outputs, expected):
        got = out.to_torch()
        assert got.dtype == torch.bfloat16 and out.dtype == "bfloat16"
        np.testing.assert_array_equal(got.view(torch.int16).cpu().numpy().view(np.uint16), ref)


def test_torch_expandable_segments(linear, rt):
    """torch's expandable segments map memory with cuMemMap, which the pointer checks must accept too."""
    script = textwrap.dedent(f"""
        import numpy as np, torch
        from aotpack import runtime
        model = runtime.Model({str(linear[1].path)!r})
        x = torch.randn(6, 16, device="cuda")
        got = model.session(device="cuda", io="device").run([x])[0].to_torch().cpu().numpy()
        np.testing.assert_array_equal(got, model.session(device="cuda").run([x.cpu().numpy()])[0])
        print("ok")
    """)
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    done = subprocess.run([sys.executable, "-c", script], check=False, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_cuda_sessions_take_host_io_by_default_and_cpu_sessions_say_host(tmp_path, rt, cuda_arch):
    torch.manual_seed(0)
    spec = ModelSpec(HERE, TwoOutputs().eval(), (torch.randn(5, 16),), ("x",), {"x": {0: "n"}}, {"n": (1, 8)})
    result = export_cuda(spec, tmp_path / "both.aotpack", cuda_arch, cpu=True)
    model = rt.Model(result.path)
    cuda = model.session(device="cuda")
    cpu = model.session(io="device")
    assert cuda.io == "host" and cpu.io == "host"  # the CPU's device memory is host memory
    x = torch.randn(3, 16)
    with torch.no_grad():
        expected = list(spec.model(x))
    for session in (cuda, cpu):
        compare(session.run([x.numpy()]), expected, result.manifest["signature"], f"io={session.io}")
