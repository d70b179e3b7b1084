"""The session option io_memory on the CPU and at the C boundary (tests/gpu/test_gpu_device_io.py runs the
device path on a GPU)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

OLD_OPTIONS_SIZE = 16  # sizeof(aotpack_session_options_t) before io_memory was appended
IO_MEMORY_OPTIONS_SIZE = 20  # ... and before cuda_graphs and cuda_graph_cache_size were
GRAPH_OPTIONS_SIZE = 28  # ... and before cuda_pdl was


def _create(rt, model, options) -> ctypes.c_void_p:
    handle = ctypes.c_void_p()
    rt._check(rt.lib().aotpack_session_create(model._handle, ctypes.byref(options), ctypes.byref(handle)))
    return handle


def _options(rt, **fields) -> object:
    options = rt._SessionOptions()
    rt.lib().aotpack_session_options_init(ctypes.byref(options))
    for name, value in fields.items():
        setattr(options, name, value)
    return options


def test_defaults(rt):
    options = _options(rt)
    assert options.struct_size == ctypes.sizeof(rt._SessionOptions) == 32
    assert options.io_memory == 0  # AOTPACK_MEMORY_HOST
    assert options.cuda_graphs == 1 and options.cuda_graph_cache_size == 64
    assert options.cuda_pdl == 1
    assert rt.lib().aotpack_session_io_memory(None) == 0


def test_cpu_session_with_device_io_is_a_host_session(rt, mlp_package):
    model = rt.Model(mlp_package)
    host, device = model.session(), model.session(io="device")
    assert host.io == "host" and device.io == "host"  # the CPU's device memory is host memory
    x = np.random.default_rng(0).standard_normal((5, 32)).astype(np.float32)
    np.testing.assert_array_equal(device.run([x])[0], host.run([x])[0])


def test_unknown_io_memory_is_refused(rt, mlp_package):
    model = rt.Model(mlp_package)
    with pytest.raises(rt.AotpackError, match="unknown io 'gpu'; expected 'host' or 'device'"):
        model.session(io="gpu")
    with pytest.raises(rt.AotpackError) as info:
        _create(rt, model, _options(rt, io_memory=7))
    assert info.value.code == rt.StatusCode.INVALID_ARGUMENT
    assert str(info.value) == "unknown io_memory 7, expected AOTPACK_MEMORY_HOST (0) or AOTPACK_MEMORY_DEVICE (1)"


def test_callers_built_before_io_memory_get_host_io(rt, mlp_package):
    """An older caller's struct_size stops before io_memory: whatever lies beyond it is not read."""
    model = rt.Model(mlp_package)
    handle = _create(rt, model, _options(rt, struct_size=OLD_OPTIONS_SIZE, io_memory=7))
    try:
        assert rt.lib().aotpack_session_io_memory(handle) == 0
    finally:
        rt.lib().aotpack_session_destroy(handle)


def test_device_tensor_describes_itself_to_cuda_consumers(rt):
    t = rt.DeviceTensor("y", 0x7F0000001000, (3, 4), np.dtype(np.float16), 0)
    assert t.__cuda_array_interface__ == {
        "shape": (3, 4), "typestr": "<f2", "data": (0x7F0000001000, False), "version": 3, "strides": None,
        "stream": None,
    }
    bf16 = rt.DeviceTensor("y", 0x7F0000001000, (2,), "bfloat16", 0)
    assert bf16.__cuda_array_interface__["typestr"] == "<u2"  # raw bits, as host outputs give them
    # an enqueued run's output names the stream that writes it; the legacy default stream (0) is written 1
    queued = [rt.DeviceTensor("y", 0x7F0000001000, (2,), "bfloat16", 0, None, stream) for stream in (0x5A000, 0)]
    assert [q.__cuda_array_interface__["stream"] for q in queued] == [0x5A000, 1]


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"cuda_graphs": 2}, "cuda_graphs is 2, expected 0 (off) or 1 (on)"),
        ({"cuda_graph_cache_size": 0}, "cuda_graph_cache_size is 0, expected 1..65536"),
        ({"cuda_pdl": 2}, "cuda_pdl is 2, expected 0 (off) or 1 (on)"),
        ({"cuda_pdl": -1}, "cuda_pdl is -1, expected 0 (off) or 1 (on)"),
    ],
)
def test_cuda_options_are_checked_on_every_device(rt, mlp_package, fields, message):
    with pytest.raises(rt.AotpackError) as info:
        _create(rt, rt.Model(mlp_package), _options(rt, **fields))
    assert info.value.code == rt.StatusCode.INVALID_ARGUMENT and str(info.value) == message


def test_callers_built_before_graph_options_get_the_defaults(rt, mlp_package):
    """A caller's struct that ends at io_memory: the fields beyond it (garbage here) are not read."""
    model = rt.Model(mlp_package)
    handle = _create(rt, model, _options(rt, struct_size=IO_MEMORY_OPTIONS_SIZE, cuda_graphs=7,
                                         cuda_graph_cache_size=-3, cuda_pdl=7))
    rt.lib().aotpack_session_destroy(handle)


def test_callers_built_before_cuda_pdl_get_the_default(rt, mlp_package):
    """A caller's struct that ends at cuda_graph_cache_size: cuda_pdl (garbage here) is not read."""
    model = rt.Model(mlp_package)
    handle = _create(rt, model, _options(rt, struct_size=GRAPH_OPTIONS_SIZE, cuda_pdl=7))
    rt.lib().aotpack_session_destroy(handle)


def test_host_outputs_without_a_copy(rt, mlp_package):
    """run(copy=False): read-only views of the session's output memory, valid until the next run."""
    session = rt.Model(mlp_package).session()
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((5, 32)).astype(np.float32) for _ in range(2))
    copied = session.run([x])[0]
    (view,) = session.run([x], copy=False)
    np.testing.assert_array_equal(view, copied)
    assert not view.flags.writeable
    session.run([y])
    assert not np.array_equal(view, copied)  # overwritten by the next run, as documented
    np.testing.assert_array_equal(view, session.run([y])[0])
    del session  # the view keeps the session, and so its memory, alive
    assert np.isfinite(view).all()
