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
from pathlib import Path

import numpy as np
import pytest
import torch
from aotpack.build import build_package
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.targets import CpuTarget, CudaTarget, Targets
from torch import nn

REPO = Path(__file__).resolve().parents[2]

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


class Lookup(nn.Module):
    """An embedding (whose gather checks its indices) and a product after it: two steps."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(4, 8)
        self.fc = nn.Linear(8, 4)

    def forward(self, ids):
        return self.fc(self.emb(ids))


@pytest.fixture(scope="module")
def lookup_package(tmp_path_factory):
    """Lookup exported for cpu and cuda sm_90: (path, its first step's kernel, that kernel's first error, and the
    index of its error flag among the launch's parameters: after the buffers and the symbols)."""
    tmp = tmp_path_factory.mktemp("fake_cuda_lookup")
    torch.manual_seed(0)
    spec = ModelSpec(tmp / "model.py", Lookup().eval(), (torch.tensor([1, 2, 3]),), ("ids",), {"ids": {0: "n"}},
                     {"n": (1, 16)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    result = build_package(captured, tmp / "lookup.aotpack", targets=Targets(CpuTarget("x86-64-v3"), CudaTarget((90,))))
    with zipfile.ZipFile(result.path) as z:
        cuda = json.loads(z.read("program.json"))["cuda"]
    assert len(cuda["steps"]) == 2, cuda["steps"]
    step = cuda["steps"][0]
    kernel = next(k for k in cuda["kernels"] if k["name"] == step["kernel"])
    assert kernel["errors"], kernel
    return result.path, kernel["name"], kernel["errors"][0], len(step["args"]) + len(kernel["symbols"])


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


def run_tool(runtime_build, args: list[str], **extra) -> subprocess.CompletedProcess:
    """aotpack-run with `args` on the fake driver (`extra`: its FAKE_CUDA_* settings)."""
    return subprocess.run([str(runtime_build / "aotpack-run"), *args], check=False, capture_output=True, text=True,
                          timeout=120, env=fake_env(runtime_build, **extra))


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "no_graphs"])
@pytest.mark.parametrize("io", ["host", "device"])
def test_a_cuda_run_allocates_nothing(runtime_build, package, io, graphs):
    result = subprocess.run(
        [str(runtime_build / "aotpack-alloc-test"), str(package[0]), "--device", "cuda", "--io", io]
        + ([] if graphs else ["--no-cuda-graphs"]),
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=fake_env(runtime_build),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The fake driver allocates nothing in a run either (a replay included), so here even the C count is exact.
    assert re.search(r"15 runs after the warm-up: 0 C\+\+ allocations, (0 C allocations|C allocations not counted)",
                     result.stdout), result.stdout


def runs_of(trace) -> list[list[str]]:
    """The trace's runs: from the session's first cuCtxSetCurrent after its stream to each cuStreamSynchronize."""
    lines = trace.read_text().splitlines()
    start = lines.index("cuCtxSetCurrent(primary)", lines.index("cuStreamCreate(1)") + 1)
    runs, current = [], []
    for line in lines[start:]:
        current.append(line)
        if line == "cuStreamSynchronize":
            runs.append(current)
            current = []
    return runs


def calls_of(run: list[str]) -> list[str]:
    return [line.split("(")[0].split(" =")[0] for line in run]


def staging_calls(run: list[str]) -> list[str]:
    return [line for line in run if line.startswith(("cuMemHostAlloc", "cuMemFreeHost"))]


def test_the_driver_calls_of_a_host_io_run(runtime_build, package, tmp_path):
    """Without graphs, each run queues its copies (from and to page-locked staging memory) and launches. The staging
    memory comes with the first run, sized for it, and grows (at least doubling, at most to the maxima) when a
    larger shape comes; a smaller one reuses it."""
    path, steps = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        f"""
        import numpy as np
        from aotpack import runtime as rt
        session = rt.Model({str(path)!r}).session(device="cuda", cuda_graphs=False)
        for n in (5, 6, 16, 3):
            (out,) = session.run([np.zeros((n, 8), np.float32)])
            assert out.shape == (n, 4), out.shape
        del session, out
        open({str(trace)!r}, "a").write("-- session destroyed\\n")
        """,
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr
    lines = trace.read_text().splitlines()
    created = lines.index("cuStreamCreate(1)")
    # The session itself page-locks only its error flags (one int32 per step), mapped for the kernels to write.
    made = lines[created:created + lines[created:].index("cuCtxSetCurrent(primary)")]
    assert staging_calls(made) == [f"cuMemHostAlloc({max(4 * steps, 256)}, 2) = h1"], lines  # DEVICEMAP
    assert "cuMemHostGetDevicePointer(h1+0, 0)" in made, made
    runs = runs_of(trace)
    assert len(runs) == 4, runs
    # Input n * 32 bytes, output n * 16 (each allocation at least 256): n=5 allocates both, n=6 doubles the input
    # (160 -> 320) and the output (80 -> 160), n=16 grows both to the maxima, n=3 fits.
    assert [staging_calls(run) for run in runs] == [
        ["cuMemHostAlloc(256, 0) = h2", "cuMemHostAlloc(256, 0) = h3"],
        ["cuMemHostAlloc(320, 0) = h4", "cuMemHostAlloc(256, 0) = h5"],
        ["cuMemHostAlloc(512, 0) = h6", "cuMemHostAlloc(256, 0) = h7"],
        [],
    ], runs
    # The outgrown memory stays until the session goes (a copy=False view of an earlier output may read it).
    destroyed = lines.index("-- session destroyed")
    last_run_end = max(i for i, line in enumerate(lines[:destroyed]) if line == "cuStreamSynchronize")
    assert sorted(staging_calls(lines[last_run_end:destroyed])) == sorted(
        f"cuMemFreeHost(h{k}+0)" for k in range(1, 8)), lines
    for n, run in zip((5, 6, 16, 3), runs):
        run = [line for line in run if line not in staging_calls(run)]
        # The error flags are neither cleared nor copied back on the stream: the kernels write them in host memory.
        assert calls_of(run) == (
            ["cuCtxSetCurrent", "cuMemcpyHtoDAsync"] + ["cuLaunchKernel"] * steps + ["cuMemcpyDtoHAsync", "cuStreamSynchronize"]
        ), run
        assert run[1].endswith(f", {n * 8 * 4})") and run[-2].endswith(f", {n * 4 * 4})"), run
        # Host I/O goes through the session's page-locked memory (h<k>), never the caller's (host).
        assert re.match(r"cuMemcpyHtoDAsync\(d\d+\+0, h\d+\+0, ", run[1]), run[1]
        assert re.match(r"cuMemcpyDtoHAsync\(h\d+\+0, d\d+\+0, ", run[-2]), run[-2]


def test_a_device_io_session_page_locks_only_its_error_flags(runtime_build, package, tmp_path):
    path, steps = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        DEVICE_TENSOR + f"""
session = rt.Model({str(path)!r}).session(device="cuda", io="device")
x = alloc(16 * 8 * 4)
for n in (16, 3, 7):
    (out,) = session.run([Dev(x, (n, 8))])
    assert out.shape == (n, 4)
""",
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr
    lines = trace.read_text().splitlines()
    session = lines[lines.index("cuStreamCreate(1)"):]
    # The flags' page-locked int32s, freed with the session; no staging memory at all.
    assert staging_calls(session) == [f"cuMemHostAlloc({max(4 * steps, 256)}, 2) = h1", "cuMemFreeHost(h1+0)"], session


def test_growing_the_staging_memory_drops_the_graphs_that_name_it(runtime_build, package, tmp_path):
    """A graph bakes in the staging buffers' addresses: when they move, every cached graph goes, and a shape
    recorded before is recorded again. At the maxima, the memory never moves again."""
    path, _ = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        f"""
        import numpy as np
        from aotpack import runtime as rt
        session = rt.Model({str(path)!r}).session(device="cuda")
        for n in (2, 2, 16, 2, 2, 16):
            (out,) = session.run([np.zeros((n, 8), np.float32)])
            assert out.shape == (n, 4)
        """,
        FAKE_CUDA_TRACE=str(trace),
        AOTPACK_TIMINGS="1",
    )
    assert result.returncode == 0, result.stderr
    events = [[line.split(" =")[0].split(",")[0] for line in run
               if line.startswith(("cuMemHostAlloc", "cuGraphInstantiate", "cuGraphExecDestroy", "cuGraphLaunch"))]
              for run in runs_of(trace)]
    assert events == [
        ["cuMemHostAlloc(256", "cuMemHostAlloc(256", "cuGraphInstantiateWithFlags(g0", "cuGraphLaunch(e0"],
        ["cuGraphLaunch(e0"],
        ["cuMemHostAlloc(512", "cuMemHostAlloc(256", "cuGraphExecDestroy(e0)", "cuGraphInstantiateWithFlags(g1",
         "cuGraphLaunch(e1"],
        ["cuGraphInstantiateWithFlags(g2", "cuGraphLaunch(e2"],  # n=2's graph named the old buffers
        ["cuGraphLaunch(e2"],
        ["cuGraphLaunch(e1"],
    ], events
    grown = [line for line in result.stderr.splitlines() if "cuda host staging grown" in line]
    # Input 16 * 32 bytes and output 16 * 16 at the maxima, page-locked by the second growth.
    assert len(grown) == 2 and grown[-1].endswith("(0.000768 MB page-locked now)"), grown


def test_graphs_are_captured_once_per_shape_and_replayed(runtime_build, package, tmp_path):
    path, steps = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        f"""
        import numpy as np
        from aotpack import runtime as rt
        session = rt.Model({str(path)!r}).session(device="cuda")
        for n in (16, 5, 16, 5, 5):  # the maxima first: the staging memory never moves (see below)
            (out,) = session.run([np.full((n, 8), n, np.float32)])
            assert out.shape == (n, 4), out.shape
        """,
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr
    runs = runs_of(trace)
    assert len(runs) == 5, runs
    capture = (
        ["cuCtxSetCurrent", "cuStreamBeginCapture", "capture: cuMemcpyHtoDAsync"]
        + ["capture: cuLaunchKernel"] * steps
        + ["capture: cuMemcpyDtoHAsync", "cuStreamEndCapture",
           "cuGraphInstantiateWithFlags", "cuGraphDestroy", "cuGraphLaunch", "cuStreamSynchronize"]
    )
    for n, run in zip((16, 5), runs[:2]):
        run = [line for line in run if line not in staging_calls(run)]
        assert calls_of(run) == capture, run
        assert run[1] == "cuStreamBeginCapture(mode 1)", run  # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        assert run[2].endswith(f", {n * 8 * 4})") and run[-6].endswith(f", {n * 4 * 4})"), run
    # Its nodes: the input copy, the steps, the output copy.
    assert runs[0][-2] == f"cuGraphLaunch(e0, {steps + 2} nodes)", runs[0]
    # Later runs at a recorded shape: the inputs staged on the host, then one launch of that shape's graph.
    for run, exec_id in zip(runs[2:], (0, 1, 1)):
        assert run == ["cuCtxSetCurrent(primary)", f"cuGraphLaunch(e{exec_id}, {steps + 2} nodes)",
                       "cuStreamSynchronize"], run


def test_the_graph_cache_evicts_the_least_recently_used_shape(runtime_build, package, tmp_path):
    path, _ = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        f"""
        import numpy as np
        from aotpack import runtime as rt
        session = rt.Model({str(path)!r}).session(device="cuda", cuda_graph_cache_size=2)
        for n in (3, 1, 3, 2, 1, 2, 3):  # the largest first: the staging memory never moves (see below)
            session.run([np.zeros((n, 8), np.float32)])
        del session
        """,
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr
    runs = runs_of(trace)
    events = [[line for line in run if line.startswith(("cuGraphInstantiate", "cuGraphExecDestroy", "cuGraphLaunch"))]
              for run in runs]
    events = [[e.split(",")[0].replace("cuGraphInstantiateWithFlags(", "new ").split(")")[0] for e in run]
              for run in events]
    assert events == [
        ["new g0", "cuGraphLaunch(e0"],                            # n=3: captured
        ["new g1", "cuGraphLaunch(e1"],                            # n=1: captured
        ["cuGraphLaunch(e0"],                                      # n=3: replayed
        ["cuGraphExecDestroy(e1", "new g2", "cuGraphLaunch(e2"],   # n=2: n=1 was least recently used
        ["cuGraphExecDestroy(e0", "new g3", "cuGraphLaunch(e3"],   # n=1 again: n=3 evicted
        ["cuGraphLaunch(e2"],                                      # n=2: replayed
        ["cuGraphExecDestroy(e3", "new g4", "cuGraphLaunch(e4"],   # n=3 again: n=1 evicted
    ], events
    lines = trace.read_text().splitlines()
    # Destroying the session frees the graphs it still holds.
    assert sorted(line for line in lines if line.startswith("cuGraphExecDestroy")) == [
        "cuGraphExecDestroy(e0)", "cuGraphExecDestroy(e1)", "cuGraphExecDestroy(e2)", "cuGraphExecDestroy(e3)",
        "cuGraphExecDestroy(e4)"]


DEVICE_TENSOR = """
import ctypes
import numpy as np
from aotpack import runtime as rt
cuda = ctypes.CDLL("libcuda.so.1")

class Dev:  # what a device-I/O session reads of a torch CUDA tensor
    device = type("Device", (), {"type": "cuda"})()
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
"""


def test_a_device_io_run_fills_the_sessions_argument_structs_one_thread_at_a_time(runtime_build, package):
    """A device-I/O run fills argument structs the session keeps (runtime.py): a run while another thread's is
    inside is refused before it touches them, in the runtime's words; a wrong number of inputs still reaches the
    runtime's own message; shapes and pointers change from run to run, and a run at the last run's shape returns
    the same output objects."""
    path, _ = package
    result = run_python(
        runtime_build,
        DEVICE_TENSOR + f"""
session = rt.Model({str(path)!r}).session(device="cuda", io="device")
x = alloc(16 * 8 * 4)
with session._run_lock:  # as while another thread's run is inside the runtime
    try:
        session.run([Dev(x, (3, 8))])
        raise SystemExit("not refused")
    except rt.AotpackError as e:
        assert e.code == rt.StatusCode.INVALID_ARGUMENT and str(e) == rt._IN_USE, str(e)
        assert str(e).startswith("aotpack_session_run was called while another thread is using this session")
for inputs in ([], [Dev(x, (3, 8)), Dev(x, (3, 8))], [Dev(x, (3, 8)), "not a tensor"]):
    try:
        session.run(inputs)
        raise SystemExit("not refused")
    except rt.AotpackError as e:
        assert str(e).endswith(f"the model takes 1 inputs (x), got {{len(inputs)}}"), str(e)
for n, ptr in ((3, x + 64), (16, x), (1, x + 128)):
    (out,) = session.run([Dev(ptr, (n, 8))])
    assert out.shape == (n, 4), out.shape
# the same shape again gives the same (immutable) DeviceTensor, made once; another shape a new one
(again,) = session.run([Dev(x, (1, 8))])
(other,) = session.run([Dev(x, (2, 8))])
assert again is out and other is not out and other.shape == (2, 4) and other.data == out.data, (again, other)
""",
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "no_graphs"])
def test_device_inputs_at_new_addresses(runtime_build, package, tmp_path, graphs):
    """With graphs, a shape's first run records a graph that reads the caller's input in place, which replays only
    for runs given that same pointer, with no copy; a run given another pointer copies it into the session's input
    buffer and replays the shape's graph that reads that buffer (recorded by the first such run), so no stale
    pointer is replayed. Without graphs, the launches read the caller's memory in place."""
    path, steps = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        DEVICE_TENSOR + f"""
session = rt.Model({str(path)!r}).session(device="cuda", io="device", cuda_graphs={graphs})
a, b = alloc(16 * 8 * 4), alloc(16 * 8 * 4)
print("callers", a, b)
for ptr in (a, b, a + 128, b, a):
    (out,) = session.run([Dev(ptr, (3, 8))])
    assert out.shape == (3, 4)
""",
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr
    lines = trace.read_text().splitlines()
    callers = [line.split(" = ")[1] for line in lines if line.startswith("cuMemAlloc(512) = ")][-2:]
    runs = runs_of(trace)
    assert len(runs) == 5, runs
    sources = [f"{callers[0]}+0", f"{callers[1]}+0", f"{callers[0]}+128", f"{callers[1]}+0", f"{callers[0]}+0"]
    for i, (run, source) in enumerate(zip(runs, sources)):
        assert run[0] == "cuCtxSetCurrent(primary)" and run[1].startswith("cuPointerGetAttributes("), run
        launches = [line for line in run if "cuLaunchKernel" in line]
        if not graphs:
            assert not any("Capture" in line or "cuGraphLaunch" in line for line in run), run
            assert len(launches) == steps and f"first parameter {source}" in launches[0], run
        elif i == 0:  # recorded reading the caller's input in place: no copy
            assert calls_of(run)[2] == "cuStreamBeginCapture", run
            assert launches and all(line.startswith("capture: ") for line in launches), run
            assert f"first parameter {source}" in launches[0], launches
        elif i == 4:  # the first pointer again: its graph replayed, no copy
            assert calls_of(run)[2:] == ["cuGraphLaunch", "cuStreamSynchronize"], run
            assert run[2] == runs[0][-2], (run, runs[0])
        else:  # another pointer: copied into the session's buffer, which the second graph reads
            copy = run[2]
            assert copy.startswith("cuMemcpyDtoDAsync(d") and copy.endswith(f", {source}, {3 * 8 * 4})"), run
            session_buffer = copy.split("(")[1].split(",")[0]
            assert session_buffer.split("+")[0] not in callers, copy
            if i == 1:
                assert launches and all(line.startswith("capture: ") for line in launches), run
                assert f"first parameter {session_buffer}" in launches[0], launches
                assert not any(c + "+" in line for c in callers for line in launches), launches
            else:
                assert not launches and calls_of(run)[3:] == ["cuGraphLaunch", "cuStreamSynchronize"], run
                assert run[3] == runs[1][-2], (run, runs[1])


def test_checks_work_under_replay(runtime_build, package):
    """An out-of-range input is refused with its message at a recorded shape's neighbour and a device pointer
    check still runs before a replay; a failed capture leaves the session usable."""
    path, _ = package
    result = run_python(
        runtime_build,
        DEVICE_TENSOR + f"""
session = rt.Model({str(path)!r}).session(device="cuda", io="device")
big = alloc(16 * 8 * 4)
session.run([Dev(big, (4, 8))])
session.run([Dev(big, (4, 8))])
for ptr, n in ((big, 17), (big + 4, 4), (alloc(64), 4)):
    try:
        session.run([Dev(ptr, (n, 8))])
    except rt.AotpackError as e:
        print(e.code.name, e)
(out,) = session.run([Dev(big, (4, 8))])
print("ok", out.shape)
""",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith('OUT_OF_RANGE input "x" dim 0 (n) = 17 is outside the declared range 1..16'), lines
    assert lines[1].startswith("INVALID_ARGUMENT") and "is not 16-byte aligned" in lines[1], lines
    assert lines[2].startswith("INVALID_ARGUMENT") and "too few for the tensor's 128 bytes" in lines[2], lines
    assert lines[3] == "ok (4, 4)", lines


def test_a_failed_capture_leaves_the_session_usable(runtime_build, package):
    path, _ = package
    result = run_python(
        runtime_build,
        f"""
        import numpy as np
        from aotpack import runtime as rt
        session = rt.Model({str(path)!r}).session(device="cuda")
        try:
            session.run([np.zeros((3, 8), np.float32)])
        except rt.AotpackError as e:
            print(e)
        (out,) = session.run([np.zeros((3, 8), np.float32)])
        print("ok", out.shape)
        """,
        FAKE_CUDA_FAIL_LAUNCH="1",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "launching cuda step 0 (kernel " in lines[0] and "CUDA_ERROR_FAKE (700" in lines[0], lines
    assert lines[1] == "ok (3, 4)", lines


@pytest.mark.parametrize(
    "options,message",
    [
        ("cuda_graph_cache_size=0", "cuda_graph_cache_size is 0, expected 1..65536"),
        ("cuda_graph_cache_size=65537", "cuda_graph_cache_size is 65537, expected 1..65536"),
    ],
)
def test_graph_options_are_checked(runtime_build, package, options, message):
    result = run_python(
        runtime_build,
        f"""
        from aotpack import runtime as rt
        model = rt.Model({str(package[0])!r})
        try:
            rt.Session(model, device="cuda", {options})
        except rt.AotpackError as e:
            print(e.code.name, e)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"INVALID_ARGUMENT {message}", result.stdout


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "no_graphs"])
def test_the_tool_times_capture_and_replay(runtime_build, package, tmp_path, graphs):
    trace = tmp_path / "trace.txt"
    result = run_tool(runtime_build, [str(package[0]), "--device", "cuda", "--repeat", "3", "--timings",
                                      *([] if graphs else ["--no-cuda-graphs"])], FAKE_CUDA_TRACE=str(trace))
    assert result.returncode == 0, result.stderr
    if graphs:
        assert re.search(r"first run [\d.]+ ms \(capture\), median of 3 runs [\d.]+ ms \(replay\) "
                         r"\(cuda:0, host inputs and outputs, CUDA graphs\)", result.stdout), result.stdout
    else:
        assert re.search(r"first run [\d.]+ ms, median of 3 runs [\d.]+ ms \(cuda:0, host inputs and outputs, "
                         r"no CUDA graphs\)", result.stdout), result.stdout
    text = trace.read_text()
    assert text.count("cuStreamBeginCapture") == (1 if graphs else 0), text
    assert text.count("cuGraphLaunch") == (4 if graphs else 0), text
    # --timings: where the time to the first result went, part by part.
    for part in ("digests", "cuda driver", "cuda context", "cuda modules", "cuda weights", "open to first result"):
        assert part in result.stderr, result.stderr


def test_the_tool_runs_on_device_memory_on_request(runtime_build, package, tmp_path):
    """aotpack-run --io device: the inputs copied into device memory once, before the first run; each replay is one
    launch of a graph of the steps alone, reading them in place; the outputs read back after the last run and
    written as with host I/O. Without --device cuda it is a usage error."""
    from safetensors.numpy import load_file, save_file

    path, steps = package
    trace = tmp_path / "trace.txt"
    save_file({"x": np.arange(5 * 8, dtype=np.float32).reshape(5, 8)}, str(tmp_path / "in.safetensors"))
    result = run_tool(runtime_build, [str(path), "--device", "cuda", "--io", "device", "--repeat", "3",
                                      "--inputs", str(tmp_path / "in.safetensors"),
                                      "--outputs", str(tmp_path / "out.safetensors")], FAKE_CUDA_TRACE=str(trace))
    assert result.returncode == 0, result.stderr
    assert re.search(r"first run [\d.]+ ms \(capture\), median of 3 runs [\d.]+ ms \(replay\) "
                     r"\(cuda:0, device inputs and outputs, CUDA graphs\)", result.stdout), result.stdout
    assert load_file(str(tmp_path / "out.safetensors"))["output"].shape == (5, 4)
    lines = trace.read_text().splitlines()
    upload = next(i for i, line in enumerate(lines) if line.startswith("cuMemcpyHtoD(") and line.endswith(", 160)"))
    captured = lines.index("cuStreamBeginCapture(mode 1)")
    read_back = next(i for i, line in enumerate(lines) if line.startswith("cuMemcpyDtoH("))
    assert upload < captured < read_back and lines[read_back].endswith(", 80)"), lines
    between = lines[captured:read_back]
    assert [line for line in between if line.startswith("cuGraphLaunch")] == [f"cuGraphLaunch(e0, {steps} nodes)"] * 4
    assert not any(line.startswith("cuMemcpy") for line in between), between
    for args, message in ((["--io", "device"], "--io device needs --device cuda"),
                          (["--device", "cuda", "--io", "pinned"], '--io is "pinned"; expected host or device')):
        refused = run_tool(runtime_build, [str(path), *args])
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr


def test_the_tool_times_runs_queued_back_to_back(runtime_build, package, tmp_path):
    """aotpack-run --io device --queue N: after the timed runs, N runs queued on the default stream with no wait
    between them (each its graph launch and the event after it), then one wait; its share a run is reported.
    --queue needs --io device."""
    path, _ = package
    trace = tmp_path / "trace.txt"
    result = run_tool(runtime_build, [str(path), "--device", "cuda", "--io", "device", "--repeat", "2", "--queue", "4"],
                      FAKE_CUDA_TRACE=str(trace))
    assert result.returncode == 0, result.stderr
    assert re.search(r"median of 2 runs [\d.]+ ms \(replay\), 4 runs queued back to back [\d.]+ ms a run \(cuda:0",
                     result.stdout), result.stdout
    lines = trace.read_text().splitlines()
    first = max(i for i, line in enumerate(lines) if line.startswith("cuEventCreate("))  # the session's, made by enqueue
    waited = next(i for i, line in enumerate(lines) if i > first and line.startswith("cuEventSynchronize("))
    queued = [line.split("(")[0] for line in lines[first:waited] if not line.startswith(("cuCtxSet", "cuPointerGet"))]
    assert queued == ["cuEventCreate"] + ["cuGraphLaunch", "cuEventRecord"] * 4, lines[first:waited]
    needs_device_io = "--queue queues runs on a CUDA stream, which needs --device cuda --io device"
    for args, message in ((["--device", "cuda", "--queue", "3"], needs_device_io),
                          (["--device", "cuda", "--io", "device", "--queue", "0"], "--queue must be 1..1000000")):
        refused = run_tool(runtime_build, [str(path), *args])
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr


def test_the_benchmark_reads_the_tools_replay_and_queued_times(runtime_build, package):
    """scripts/gpu_bench.py's "aotpack C++" and "aotpack C++ queued" columns: aotpack-run --io device --queue on the
    benchmark's own inputs, both times read from its report."""
    path, _ = package
    result = run_python(
        runtime_build,
        f"""
        import sys
        import torch
        sys.path.insert(0, {str(REPO / "scripts")!r})
        import gpu_bench
        replay, queued = gpu_bench.cpp_replay_and_queued_ms(__import__("pathlib").Path({str(path)!r}), ["x"], [torch.ones(5, 8)], 6)
        print(replay, queued)
        assert isinstance(replay, float) and isinstance(queued, float), (replay, queued)
        """,
    )
    assert result.returncode == 0, result.stdout + result.stderr


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
    result = run_tool(runtime_build, [str(package[0]), "--device", "cuda"], **fail)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "CUDA_ERROR_FAKE (700: fake driver error)" in result.stderr, result.stderr


def test_a_device_the_host_lacks(runtime_build, package):
    result = run_tool(runtime_build, [str(package[0]), "--device", "cuda:1"])
    assert result.returncode == 1 and "CUDA device 1 does not exist: this host has 1 CUDA device" in result.stderr


def test_a_load_prepares_the_gpu_while_it_checks_the_digests(runtime_build, package, tmp_path):
    """Model(prepare="cuda"): the cubins load and the weights upload during the load; the session finds them."""
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        f"""
        import numpy as np
        from aotpack import runtime as rt
        model = rt.Model({str(package[0])!r}, prepare="cuda")
        open({str(trace)!r}, "a").write("-- loaded\\n")
        model.session(device="cuda").run([np.zeros((2, 8), np.float32)])
        """,
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr
    lines = trace.read_text().splitlines()
    loaded = lines.index("-- loaded")
    assert any(line.startswith("cuModuleLoadData") for line in lines[:loaded]), lines
    weights = next(line for line in lines if line.startswith("cuMemAlloc(")).split(" = ")[1]
    uploads = [i for i, line in enumerate(lines) if line.startswith(f"cuMemcpyHtoDAsync({weights}+")]
    assert uploads and max(uploads) < loaded, lines  # the weights, during the load only
    assert not any(line.startswith("cuModuleLoadData") for line in lines[loaded:]), lines


def test_a_prepared_load_still_fails_on_a_bad_digest(runtime_build, package, tmp_path):
    """The weights upload before their digest is known; a mismatch still fails the load, and frees the device."""
    from runtime_helpers import flip_byte

    bad = flip_byte(package[0], tmp_path / "bad.aotpack", "weights.safetensors", 200)
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        f"""
        from aotpack import runtime as rt
        try:
            rt.Model({str(bad)!r}, prepare="cuda")
        except rt.AotpackError as e:
            print(e.code.name, e)
        """,
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"DATA_LOSS package {bad}: member weights.safetensors does not match its sha256 "
                                    "digest in manifest.json"), result.stdout
    lines = trace.read_text().splitlines()
    allocations = [line.split(" = ")[1] for line in lines if line.startswith("cuMemAlloc(")]
    assert allocations and all(f"cuMemFree({a}+0)" in lines for a in allocations), lines
    assert "cuModuleUnload" in lines and "cuDevicePrimaryCtxRelease(0)" in lines, lines


@pytest.mark.parametrize("io", ["host", "device"])
def test_a_stream_that_cannot_capture_runs_without_graphs(runtime_build, package, tmp_path, io):
    path, steps = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        DEVICE_TENSOR + f"""
session = rt.Model({str(path)!r}).session(device="cuda", io={io!r})
big = alloc(16 * 8 * 4)
for n in (3, 3, 5):
    x = Dev(big, (n, 8)) if {io!r} == "device" else np.zeros((n, 8), np.float32)
    (out,) = session.run([x])
    assert out.shape == (n, 4)
""",
        FAKE_CUDA_TRACE=str(trace),
        FAKE_CUDA_FAIL_CAPTURE="1",
        AOTPACK_TIMINGS="1",
    )
    assert result.returncode == 0, result.stderr
    assert "cuda graphs off for this session, capture refused" in result.stderr, result.stderr
    runs = runs_of(trace)
    assert len(runs) == 3 and calls_of(runs[0]).count("cuStreamBeginCapture") == 1, runs
    for run in runs:  # every run launches its steps directly, the first (whose capture was refused) included
        assert [c for c in calls_of(run) if c == "cuLaunchKernel"] == ["cuLaunchKernel"] * steps, run
        assert not any("cuGraph" in c or c.startswith("capture") for c in calls_of(run)), run
        if io == "host":
            assert calls_of(run).count("cuMemcpyHtoDAsync") == 1 and calls_of(run).count("cuMemcpyDtoHAsync") == 1


def test_a_failed_check_is_read_from_host_memory_and_cleared(runtime_build, lookup_package, tmp_path):
    """The kernels write their error flags in page-locked host memory, which no run clears or copies on the stream:
    a run whose kernel set its flag reports that check's message and clears it, so the next run succeeds. A run that
    fails after a kernel set its flag (its next launch refused) returns before reading the flags: the next run
    waits for the stream and clears them before it stages or launches anything, and succeeds too."""
    path, kernel, error, flag = lookup_package
    runs = {}
    for case, expected, refused in (("check", "failed: ", {}), ("refusal", "launching cuda step 1", {"FAKE_CUDA_FAIL_LAUNCH": "2"})):
        trace = tmp_path / f"{case}.txt"
        code = f"""
            import numpy as np
            from aotpack import runtime as rt
            session = rt.Model({str(path)!r}).session(device="cuda", cuda_graphs=False)
            ids = np.array([1, 2, 3])
            try:
                session.run([ids])  # its first launch sets the flag
                raise SystemExit("no error")
            except rt.AotpackError as e:
                assert {expected!r} in str(e), str(e)
                print("ERROR", e)
            open({str(trace)!r}, "a").write("-- next run\\n")
            (out,) = session.run([ids])
            assert out.shape == (3, 4)
            """
        result = run_python(runtime_build, code, FAKE_CUDA_TRACE=str(trace), FAKE_CUDA_SET_FLAG=f"1:{flag}:1", **refused)
        assert result.returncode == 0, result.stdout + result.stderr
        lines = trace.read_text().splitlines()
        assert not any(line.startswith(("cuMemsetD8Async", "cuMemcpyDtoHAsync(h1")) for line in lines), lines
        runs[case] = (result.stdout, calls_of(lines[lines.index("-- next run") + 1:]))
    assert f"ERROR cuda step 0 (kernel {kernel}) failed: {error}" in runs["check"][0], runs["check"][0]
    # After a run that waited for the stream and read its flags, the next copies its input and launches; after one
    # that did not, the next waits for the stream first, before it writes the staging memory or queues anything.
    assert runs["check"][1][:3] == ["cuCtxSetCurrent", "cuMemcpyHtoDAsync", "cuLaunchKernel"], runs["check"][1]
    assert runs["refusal"][1][:3] == ["cuCtxSetCurrent", "cuStreamSynchronize", "cuMemcpyHtoDAsync"], runs["refusal"][1]


def cuda_mutants(path):
    """The package's CUDA part edited consistently (digests recomputed): launches the device would reject or
    that would write where no kernel may, and a truncated cubin."""
    from corrupt_packages import pack, read_entries

    entries = read_entries(path.read_bytes())
    program = json.loads(entries["program.json"])
    weight = next(b["id"] for b in program["buffers"] if b["kind"] == "weight")
    out = []

    def edit(kind, expect, change):
        p = json.loads(entries["program.json"])
        change(p["cuda"]["steps"])
        out.append((kind, expect, pack({**entries, "program.json": (json.dumps(p, indent=1, sort_keys=True) + "\n").encode()})))

    edit("grid 2^40", "a launch takes 0..2147483647", lambda steps: steps[0].update(grid=[2**40, 1, 1]))
    edit("grid y 70000", "a launch takes 0..65535", lambda steps: steps[0].update(grid=[1, 70000, 1]))
    edit("output pointed at a weight", "which is read-only", lambda steps: steps[-1]["args"].__setitem__(-1, weight))
    edit("output also an input", "must not alias",
         lambda steps: steps[-1]["args"].__setitem__(0, steps[-1]["args"][-1]))
    edit("no step writes the output", "is written by no step", lambda steps: steps.pop())
    cubin = next(n for n in entries if n.endswith(".cubin"))
    out.append(("cubin truncated", "is not a whole cubin", pack({**entries, cubin: entries[cubin][: len(entries[cubin]) // 2]})))
    out.append(("cubin not an ELF", "is not a whole cubin", pack({**entries, cubin: b"garbage" * 40})))
    return out


def test_a_damaged_cuda_part_is_refused_before_any_launch(runtime_build, package, tmp_path):
    failures = []
    for i, (kind, expect, data) in enumerate(cuda_mutants(package[0])):
        path = tmp_path / f"c{i}.aotpack"
        path.write_bytes(data)
        result = subprocess.run([str(runtime_build / "aotpack-run"), str(path), "--device", "cuda", "--repeat", "0"],
                                capture_output=True, text=True, timeout=60, check=False, env=fake_env(runtime_build))
        lines = result.stderr.splitlines()
        if not (result.returncode == 1 and len(lines) == 1 and expect in lines[0]):
            failures.append(f"{kind}: exit {result.returncode}, {result.stderr[-500:]!r}")
        cpu = subprocess.run([str(runtime_build / "aotpack-run"), str(path), "--repeat", "0"],
                             capture_output=True, text=True, timeout=60, check=False, env=fake_env(runtime_build))
        if cpu.returncode != 0:  # the CPU part is intact: the package still runs there
            failures.append(f"{kind} on the CPU: exit {cpu.returncode}, {cpu.stderr[-300:]!r}")
    assert not failures, "\n".join(failures)


class Wide(nn.Module):
    """A product whose best tiles change over 1..600 rows (lowering/ir/buckets.py)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 512)

    def forward(self, x):
        return self.fc(x)


@pytest.fixture(scope="module")
def wide_package(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wide")
    torch.manual_seed(0)
    spec = ModelSpec(tmp / "model.py", Wide().eval(), (torch.randn(3, 8),), ("x",), {"x": {0: "n"}}, {"n": (1, 600)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    return build_package(captured, tmp / "wide.aotpack", targets=Targets(CpuTarget("x86-64-v3"), CudaTarget((90,)))).path


def test_inspect_shows_each_buckets_configuration(wide_package):
    from aotpack.cli import main
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["inspect", str(wide_package)])
    assert result.exit_code == 0, result.output
    assert "steps have kernels per bucket of a size:" in result.output
    assert "1 matmul step(s), buckets of n:" in result.output
    assert "    <= " in result.output and "    above: " in result.output and "BM=" in result.output


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "no_graphs"])
def test_each_run_launches_the_variant_of_its_bucket(runtime_build, wide_package, tmp_path, graphs):
    """A step with kernels per bucket of its rows launches the first bucket holding the run's rows, with that
    variant's grid; sizes above every bucket launch the step's own kernel."""
    path = wide_package
    with zipfile.ZipFile(path) as z:
        steps = json.loads(z.read("program.json"))["cuda"]["steps"]
    (matmul,) = [s for s in steps if "variants" in s]
    buckets = matmul["variants"]["buckets"]
    assert matmul["variants"]["size"] == "n" and len(buckets) >= 1, matmul
    expected = {}
    for n in (1, 200, 600):
        chosen = next((b for b in buckets if n <= b["upto"]), matmul)
        expected[n] = chosen["kernel"]
    assert len(set(expected.values())) >= 2, expected
    trace = tmp_path / "trace.txt"
    result = run_python(runtime_build, f"""
        import numpy as np
        from aotpack import runtime as rt
        session = rt.Model({str(path)!r}).session(device="cuda", cuda_graphs={graphs})
        for n in (1, 200, 600):
            (out,) = session.run([np.ones((n, 8), np.float32)])
            assert out.shape == (n, 512), out.shape
        """, FAKE_CUDA_TRACE=str(trace))
    assert result.returncode == 0, result.stderr
    launches = [[line for line in run if "cuLaunchKernel(" in line] for run in runs_of(trace)]
    for n, run in zip((1, 200, 600), launches):
        assert any(f"cuLaunchKernel({expected[n]}," in line for line in run), (n, expected[n], run)


def with_step_edited(package, key: str, edit, tmp_path):
    """A copy of `package` whose first CUDA step with `key` went through edit(step, program), and that step's index."""
    from corrupt_packages import pack, read_entries

    entries = read_entries(package.read_bytes())
    program = json.loads(entries["program.json"])
    index = next(i for i, s in enumerate(program["cuda"]["steps"]) if key in s)
    edit(program["cuda"]["steps"][index], program)
    bad = tmp_path / "bad.aotpack"
    bad.write_bytes(pack({**entries, "program.json": (json.dumps(program, indent=1, sort_keys=True) + "\n").encode()}))
    return bad, index


def _grid_past_the_limit(step: dict, program: dict) -> None:
    step["variants"]["buckets"][0]["grid"] = [1, 2**20, 1]


def _buckets_not_ascending(step: dict, program: dict) -> None:
    step["variants"]["buckets"].append(dict(step["variants"]["buckets"][-1]))


def _variant_with_other_parameters(step: dict, program: dict) -> None:
    name = step["variants"]["buckets"][0]["kernel"]
    next(k for k in program["cuda"]["kernels"] if k["name"] == name)["errors"].append("a check the step lacks")


@pytest.mark.parametrize("edit, message", [
    (_grid_past_the_limit, "variants.buckets[0].grid[1] 1048576 is 1048576 at the minima"),
    (_buckets_not_ascending, "upto: the buckets must ascend"),
    (_variant_with_other_parameters, "takes other parameters than the step's kernel"),
], ids=["grid", "ascending", "parameters"])
def test_each_bucket_variant_is_checked_like_the_step(runtime_build, wide_package, tmp_path, edit, message):
    """Every (step, kernel, grid) alternative is checked at load, naming the bucket: a variant's grid past the
    device limit (though the step's own launch is fine), buckets out of order, a variant kernel that takes other
    parameters than the step's."""
    bad, index = with_step_edited(wide_package, "variants", edit, tmp_path)
    result = run_tool(runtime_build, [str(bad), "--device", "cuda", "--repeat", "0"])
    assert result.returncode == 1, result.stderr
    assert f"cuda.steps[{index}].variants" in result.stderr and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("pdl", [True, False], ids=["cuda_pdl", "no_cuda_pdl"])
def test_kernels_of_an_sm90_package_launch_with_programmatic_dependent_launch(runtime_build, package, tmp_path, pdl):
    """A package for sm_90 only marks every kernel "pdl" (it begins with griddepcontrol.wait), and by default
    (the session option cuda_pdl) the runtime launches those through cuLaunchKernelEx with programmatic stream
    serialization, in graphs and out of them; with cuda_pdl=False it launches them with cuLaunchKernel."""
    path, steps = package
    with zipfile.ZipFile(path) as z:
        kernels = json.loads(z.read("cuda/sm_90/kernels.json"))["kernels"]
        source = z.read("cuda/kernels.py").decode()
    assert kernels and all(k["pdl"] is True for k in kernels), kernels
    assert source.count("tl.extra.cuda.gdc_wait()") == len(kernels), source
    trace = tmp_path / "trace.txt"
    option = "" if pdl else ", cuda_pdl=False"  # on: the default, as a caller leaves it
    result = run_python(
        runtime_build,
        f"""
        import numpy as np
        from aotpack import runtime as rt
        for graphs in (True, False):
            session = rt.Model({str(path)!r}).session(device="cuda", cuda_graphs=graphs{option})
            session.run([np.ones((5, 8), np.float32)])
        """,
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr
    launches = [line for line in trace.read_text().splitlines() if "cuLaunchKernel(" in line]
    assert len(launches) == 2 * steps, launches  # one capture, one direct run
    assert all(line.endswith(" programmatic") == pdl for line in launches), launches


def test_programmatic_launch_is_chosen_per_session(runtime_build, package, tmp_path):
    """scripts/gpu_bench.py times the same package with and without it in one process: two sessions of one
    model, one with cuda_pdl and one without, run in turn: each keeps its own, in graphs and out of them."""
    path, steps = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        f"""
        import numpy as np
        from aotpack import runtime as rt
        model = rt.Model({str(path)!r})
        for graphs in (False, True):
            with_pdl = model.session(device="cuda", cuda_graphs=graphs)
            without = model.session(device="cuda", cuda_graphs=graphs, cuda_pdl=False)
            for session in (with_pdl, without, with_pdl, without):
                session.run([np.ones((5, 8), np.float32)])
        """,
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stderr
    launches = [line.endswith(" programmatic") for line in trace.read_text().splitlines() if "cuLaunchKernel(" in line]
    direct = ([True] * steps + [False] * steps) * 2
    captured = [True] * steps + [False] * steps  # each session's graph is recorded once, then replayed
    assert launches == direct + captured, launches


@pytest.mark.parametrize("pdl", [True, False], ids=["default", "no-cuda-pdl"])
def test_the_tool_launches_without_programmatic_dependent_launch_on_request(runtime_build, package, tmp_path, pdl):
    path, steps = package
    trace = tmp_path / "trace.txt"
    result = run_tool(runtime_build, [str(path), "--device", "cuda", "--repeat", "0", "--no-cuda-graphs",
                                      *([] if pdl else ["--no-cuda-pdl"])], FAKE_CUDA_TRACE=str(trace))
    assert result.returncode == 0, result.stderr
    summary = "(cuda:0, host inputs and outputs, no CUDA graphs" + ("" if pdl else ", no programmatic dependent launch")
    assert summary + ")" in result.stdout, result.stdout
    launches = [line for line in trace.read_text().splitlines() if "cuLaunchKernel(" in line]
    assert len(launches) == steps, launches
    assert all(line.endswith(" programmatic") == pdl for line in launches), launches


def test_the_tool_documents_no_cuda_pdl(runtime_build):
    result = subprocess.run([str(runtime_build / "aotpack-run"), "--help"], check=False, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "[--no-cuda-pdl]" in result.stdout and "unless --no-cuda-pdl" in result.stdout, result.stdout


def test_a_kernels_pdl_mark_that_is_not_a_boolean_is_refused_at_load(runtime_build, package, tmp_path):
    from corrupt_packages import pack, read_entries

    path, _ = package
    entries = read_entries(path.read_bytes())
    meta = json.loads(entries["cuda/sm_90/kernels.json"])
    meta["kernels"][0]["pdl"] = "yes"
    bad = tmp_path / "bad.aotpack"
    bad.write_bytes(pack({**entries, "cuda/sm_90/kernels.json": json.dumps(meta).encode()}))
    result = subprocess.run([str(runtime_build / "aotpack-run"), str(bad), "--device", "cuda", "--repeat", "0"],
                            capture_output=True, text=True, timeout=60, check=False, env=fake_env(runtime_build))
    assert result.returncode == 1, result.stderr
    assert "kernels[0].pdl" in result.stderr and "expected true or false" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_package_for_an_architecture_before_sm90_too_has_no_grid_dependency_control(tmp_path):
    """ptxas refuses griddepcontrol before sm_90 and one source is compiled for every architecture."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    torch.manual_seed(0)
    spec = ModelSpec(tmp_path / "model.py", Small().eval(), (torch.randn(3, 8),), ("x",), {"x": {0: "n"}}, {"n": (1, 16)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    result = build_package(captured, tmp_path / "small.aotpack", targets=Targets(None, CudaTarget((80, 90))))
    with zipfile.ZipFile(result.path) as z:
        for arch in (80, 90):
            kernels = json.loads(z.read(f"cuda/sm_{arch}/kernels.json"))["kernels"]
            assert kernels and not any(k["pdl"] for k in kernels), kernels
        assert "gdc_wait" not in z.read("cuda/kernels.py").decode()


def scratch_package(package, tmp_path, **fields):
    """The package with its first step's kernel marked as taking global scratch (kernels.json's fields), and
    the index of that kernel's hidden global scratch parameter (after its buffers, symbols and flag)."""
    from corrupt_packages import pack, read_entries

    path, _ = package
    entries = read_entries(path.read_bytes())
    program = json.loads(entries["program.json"])["cuda"]
    step = program["steps"][0]
    kernel = next(k for k in program["kernels"] if k["name"] == step["kernel"])
    meta = json.loads(entries["cuda/sm_90/kernels.json"])
    entry = next(k for k in meta["kernels"] if k["name"] == step["kernel"])
    entry.update(fields)
    edited = tmp_path / "scratch.aotpack"
    edited.write_bytes(pack({**entries, "cuda/sm_90/kernels.json": json.dumps(meta).encode()}))
    return edited, step["kernel"], len(step["args"]) + len(kernel["symbols"]) + (1 if kernel["errors"] else 0)


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "no_graphs"])
def test_a_kernel_that_takes_global_scratch_gets_its_programs_worth(runtime_build, package, tmp_path, graphs):
    """Persistent TMA products make their descriptors in global scratch (Triton's hidden parameter after the
    kernel's own): the session allocates the most a launch takes at the declared maxima (n = 16) once, and
    every launch of such a kernel passes it; the others keep a null pointer there."""
    path, kernel, index = scratch_package(package, tmp_path, global_scratch_size=12288, global_scratch_align=128)
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        f"""
        import numpy as np
        from aotpack import runtime as rt
        session = rt.Model({str(path)!r}).session(device="cuda", cuda_graphs={graphs})
        for n in (16, 5, 16):
            session.run([np.ones((n, 8), np.float32)])
        """,
        FAKE_CUDA_TRACE=str(trace), FAKE_CUDA_TRACE_PARAM=str(index),
    )
    assert result.returncode == 0, result.stderr
    lines = trace.read_text().splitlines()
    launches = [line for line in lines if f"cuLaunchKernel({kernel}," in line]
    assert len(launches) == (2 if graphs else 3), launches  # with graphs: captured once per shape
    at_max = re.search(r"grid (\d+) (\d+) (\d+)", launches[0]).groups()
    programs = int(at_max[0]) * int(at_max[1]) * int(at_max[2])
    allocation = next(re.search(r"= (d\d+)", line).group(1) for line in lines
                      if line.startswith(f"cuMemAlloc({12288 * programs})"))
    assert all(line.split(f"parameter {index} ")[1].startswith(f"{allocation}+0)") for line in launches), launches


@pytest.mark.parametrize("fields,message", [
    ({"global_scratch_size": 256, "global_scratch_align": 3}, "global_scratch_align: expected a power of two"),
    ({"global_scratch_size": 100, "global_scratch_align": 128}, "global_scratch_align: expected a power of two"),
    ({"global_scratch_size": -1}, "global_scratch_size: expected 0..1048576"),
    ({"profile_scratch_size": 64}, "needs profile scratch memory"),
], ids=["align 3", "size not a multiple", "negative size", "profile scratch"])
def test_scratch_a_runtime_cannot_give_is_refused_at_load(runtime_build, package, tmp_path, fields, message):
    bad, _, _ = scratch_package(package, tmp_path, **fields)
    result = subprocess.run([str(runtime_build / "aotpack-run"), str(bad), "--device", "cuda", "--repeat", "0"],
                            capture_output=True, text=True, timeout=60, check=False, env=fake_env(runtime_build))
    assert result.returncode == 1, result.stderr
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.fixture(scope="module")
def split_package(tmp_path_factory):
    """Small with its product forced to split-K (2 slices of its depth of 8: one of them empty), for cpu and
    cuda sm_90. Its 1..16 rows are one bucket, so the step itself names the split kernel under "split"."""
    from aotpack.lowering.backends.cuda import render
    from aotpack.lowering.backends.cuda.matmul_config import MatmulConfig

    tmp = tmp_path_factory.mktemp("fake_cuda_split")
    torch.manual_seed(0)
    spec = ModelSpec(tmp / "model.py", Small().eval(), (torch.randn(3, 8),), ("x",), {"x": {0: "n"}}, {"n": (1, 16)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(render, "matmul_config", lambda *args, **kwargs: MatmulConfig(16, 16, 16, 8, 4, 3, split_k=2))
        result = build_package(captured, tmp / "split.aotpack", targets=Targets(CpuTarget("x86-64-v3"), CudaTarget((90,))))
    return result.path


def test_a_split_product_is_launched_with_its_workspace_and_its_twin_named_for_older_runtimes(
        runtime_build, split_package, tmp_path):
    with zipfile.ZipFile(split_package) as z:
        cuda = json.loads(z.read("program.json"))["cuda"]
    kernels = {k["name"]: k for k in cuda["kernels"]}
    step = next(s for s in cuda["steps"] if "split" in s)
    split, twin = kernels[step["split"]["kernel"]], kernels[step["kernel"]]
    # one 16 x 16 tile of the 4 columns at 16 rows, 2 slices: programs and float32 tile bytes for its workspace
    assert split["split"] == {"programs": 2, "tile_bytes": 16 * 16 * 4} and "split" not in twin
    assert split["config"]["SPLIT_K"] == 2 and step["split"]["grid"][2] == 2 and step["grid"][2] == 1
    trace = tmp_path / "trace.txt"
    result = run_tool(runtime_build, [str(split_package), "--device", "cuda", "--repeat", "3", "--no-cuda-graphs"],
                      FAKE_CUDA_TRACE=str(trace))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = trace.read_text().splitlines()
    launches = [line for line in lines if line.startswith("cuLaunchKernel(") and step["split"]["kernel"] in line]
    assert len(launches) >= 3 and all(", grid 1 1 2," in line for line in launches), launches
    assert not any(line.startswith("cuLaunchKernel(") and step["kernel"] + "," in line for line in lines)
    # the counts (an int32 per program) are cleared once, when the session is made, and waited for there (a run
    # queued on a caller's stream is not ordered after the session's): the only memset of the three runs
    memsets = [line for line in lines if line.startswith("cuMemsetD8Async(")]
    assert len(memsets) == 1 and memsets[0].endswith(", 0, 8)"), memsets
    assert lines[lines.index(memsets[0]) + 1] == "cuStreamSynchronize", lines
    assert lines.index(memsets[0]) < lines.index(launches[0]), lines


def _split_kernel_named_as_the_step_kernel(step: dict, program: dict) -> None:
    step["kernel"] = step["split"]["kernel"]


def _split_without_workspace(step: dict, program: dict) -> None:
    del next(k for k in program["cuda"]["kernels"] if k["name"] == step["split"]["kernel"])["split"]


def _split_workspace_past_the_limit(step: dict, program: dict) -> None:
    next(k for k in program["cuda"]["kernels"] if k["name"] == step["split"]["kernel"])["split"]["tile_bytes"] = 2**30


def _split_with_other_parameters(step: dict, program: dict) -> None:
    next(k for k in program["cuda"]["kernels"] if k["name"] == step["split"]["kernel"])["symbols"] = []


@pytest.mark.parametrize("edit, message", [
    (_split_kernel_named_as_the_step_kernel, "is a split-K kernel, which only a \"split\" entry may launch"),
    (_split_without_workspace, "takes no split-K workspace"),
    (_split_workspace_past_the_limit, "split.tile_bytes: expected a multiple of 4 with programs x tile_bytes at most"),
    (_split_with_other_parameters, "takes other parameters than"),
], ids=["as-step-kernel", "no-workspace", "workspace-size", "parameters"])
def test_a_split_launch_is_checked_at_load(runtime_build, split_package, tmp_path, edit, message):
    """A split-K kernel where a runtime without split-K would launch it, a "split" entry naming a kernel with no
    workspace, a workspace past what a session allocates, or other parameters than its twin: refused at load
    with one line naming the entry."""
    bad, _ = with_step_edited(split_package, "split", edit, tmp_path)
    result = run_tool(runtime_build, [str(bad), "--device", "cuda", "--repeat", "0"])
    assert result.returncode == 1, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


# ---- runs queued on a caller's stream (aotpack_session_enqueue) ----------------------------------------------

QUEUE = DEVICE_TENSOR + """
cuda.fake_cuda_caller_stream.restype = ctypes.c_void_p
streams = [cuda.fake_cuda_caller_stream(k) for k in range(2)]

def mark(text):  # a line in the driver's trace between two calls of the test
    cuda.cuInit(0)
    print(text, flush=True)

class Ids(Dev):
    dtype = "int64"
"""


def between_marks(trace, stdout: str) -> dict[str, list[str]]:
    """The trace's lines after each mark the test printed, up to the next (a mark is a traced cuInit(0))."""
    marks = [line for line in stdout.splitlines() if line.startswith("MARK ")]
    lines = trace.read_text().splitlines()
    cuts = [i for i, line in enumerate(lines) if line == "cuInit(0)"][-len(marks):]
    return {mark: lines[start + 1:end] for mark, start, end in zip(marks, cuts, cuts[1:] + [len(lines)])}


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "no_graphs"])
def test_a_queued_run_goes_on_the_callers_stream_and_waits_only_when_asked(runtime_build, package, tmp_path, graphs):
    """enqueue puts the run's work (its graph, or its launches) on the caller's stream and an event after it, and
    returns without waiting; runs queued one after another on one stream need nothing between them, a run queued on
    another stream waits for the previous one there (on the device), synchronize waits for the event, a synchronous
    run waits for the queued runs before it starts, and destroying a session waits for its queued runs before it
    frees their memory."""
    path, steps = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        QUEUE + f"""
session = rt.Model({str(path)!r}).session(device="cuda", io="device", cuda_graphs={graphs})
x = alloc(16 * 8 * 4)
mark("MARK first")
(out,) = session.enqueue([Dev(x, (3, 8))], streams[0])
assert out.shape == (3, 4)
mark("MARK same stream")
session.enqueue([Dev(x, (3, 8))], streams[0])
mark("MARK other stream")
session.enqueue([Dev(x, (3, 8))], streams[1])
mark("MARK synchronize")
session.synchronize()
mark("MARK synchronize again")
session.synchronize()
mark("MARK after a wait")
session.enqueue([Dev(x, (3, 8))], streams[0])
mark("MARK run")
session.run([Dev(x, (3, 8))])
mark("MARK queued before destroy")
session.enqueue([Dev(x, (3, 8))], streams[1])
mark("MARK destroy")
session.close()
""",
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    parts = between_marks(trace, result.stdout)
    event = next(line.split(" = ")[1] for line in parts["MARK first"] if line.startswith("cuEventCreate(2) = "))

    def work(lines: list[str], stream: int) -> list[str]:
        """What went on caller stream `stream`, as calls."""
        return [line.split("(")[0] for line in lines if line.endswith(f" on caller stream {stream}")]

    run_work = ["cuGraphLaunch"] if graphs else ["cuLaunchKernel"] * steps
    never = ("cuStreamSynchronize", "cuEventSynchronize")
    assert work(parts["MARK first"], 0) == [*run_work, "cuEventRecord"], parts["MARK first"]
    assert not any(line.startswith(never) for line in parts["MARK first"]), parts["MARK first"]
    assert work(parts["MARK same stream"], 0) == [*run_work, "cuEventRecord"], parts["MARK same stream"]
    assert not any(line.startswith(("cuStreamWaitEvent", *never)) for line in parts["MARK same stream"])
    assert work(parts["MARK other stream"], 1) == ["cuStreamWaitEvent", *run_work, "cuEventRecord"]
    assert f"cuStreamWaitEvent({event}, 0) on caller stream 1" in parts["MARK other stream"]
    assert parts["MARK synchronize"] == ["cuCtxSetCurrent(primary)", f"cuEventSynchronize({event})"]
    assert parts["MARK synchronize again"] == []
    assert work(parts["MARK after a wait"], 0) == [*run_work, "cuEventRecord"], parts["MARK after a wait"]
    run = parts["MARK run"]
    assert run.index(f"cuEventSynchronize({event})") < min(i for i, line in enumerate(run) if "cuPointerGet" in line)
    assert run[-1] == "cuStreamSynchronize" and not any("caller stream" in line for line in run), run
    destroy = parts["MARK destroy"]
    assert destroy[:3] == ["cuCtxSetCurrent(primary)", f"cuEventSynchronize({event})", f"cuEventDestroy({event})"]
    assert any(line.startswith("cuMemFree(") for line in destroy[3:]), destroy


def test_a_queued_runs_failed_check_is_reported_by_synchronize_or_the_next_run(runtime_build, lookup_package):
    """A check that fails in a queued run's kernel is unknown when enqueue returns: synchronize raises it, and clears
    it; a synchronous run after a queued run that failed raises that failure without running, and the run after it
    succeeds."""
    path, kernel, error, flag = lookup_package
    result = run_python(
        runtime_build,
        QUEUE + f"""
session = rt.Model({str(path)!r}).session(device="cuda", io="device", cuda_graphs=False)
ids = alloc(16 * 8)
session.enqueue([Ids(ids, (3,))], streams[0])  # its first launch sets the flag (FAKE_CUDA_SET_FLAG)
print("queued")
for call in (session.synchronize, session.synchronize):
    try:
        call()
        print("ok")
    except rt.AotpackError as e:
        print(e.code.name, e)
session.enqueue([Ids(ids, (3,))], streams[0])  # its first launch sets the flag again (the third launch)
for _ in range(2):
    try:
        (out,) = session.run([Ids(ids, (3,))])
        print("ran", out.shape)
    except rt.AotpackError as e:
        print(e.code.name, e)
""",
        FAKE_CUDA_SET_FLAG=f"1:{flag}:1,3:{flag}:1",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    failure = f"cuda step 0 (kernel {kernel}) failed: {error}"
    assert lines[0] == "queued", lines
    assert lines[1] == f"INVALID_ARGUMENT {failure}", lines
    assert lines[2] == "ok", lines
    assert lines[3].startswith("INVALID_ARGUMENT a run queued by aotpack_session_enqueue before this one failed, and "
                               "this one did not start") and lines[3].endswith(failure), lines
    assert lines[4] == "ran (3, 4)", lines


def test_a_run_beside_torch_waits_for_torchs_current_stream_on_the_device(runtime_build, package, tmp_path):
    """Where torch has initialised CUDA, a device-I/O run() starts after the work on torch's current stream (it may be
    writing the inputs) by a wait on the device (aotpack_session_run_after): an event recorded on that stream, which
    the session's own stream waits for before the run's work; the host waits only for the run's end, and never for
    torch's stream. A runtime without that call: the host waits for torch's stream first, as before it."""
    path, _ = package
    trace = tmp_path / "trace.txt"
    result = run_python(
        runtime_build,
        QUEUE + f"""
import sys, types
current = [0]
class TorchStream:
    def synchronize(self):
        print("torch stream synchronize", flush=True)
torch = types.ModuleType("torch")
torch.cuda = types.SimpleNamespace(is_initialized=lambda: True, current_stream=lambda device: TorchStream())
torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: streams[current[0]])
sys.modules["torch"] = torch
session = rt.Model({str(path)!r}).session(device="cuda", io="device")
x = alloc(16 * 8 * 4)
for i, k in enumerate((0, 0, 1)):
    current[0] = k
    mark(f"MARK run {{i}} on {{k}}")
    (out,) = session.run([Dev(x, (3, 8))])
    assert out.shape == (3, 4) and out.stream is None, out

class WithoutRunAfter:  # a runtime library from before aotpack_session_run_after
    def __init__(self, lib):
        self.lib = lib
    def __getattr__(self, name):
        if name == "aotpack_session_run_after":
            raise AttributeError(name)
        return getattr(self.lib, name)
session._lib = WithoutRunAfter(session._lib)
mark("MARK older runtime")
session.run([Dev(x, (3, 8))])
""",
        FAKE_CUDA_TRACE=str(trace),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    parts = between_marks(trace, result.stdout)
    event = next(line.split(" = ")[1] for line in parts["MARK run 0 on 0"] if line.startswith("cuEventCreate(2) = "))
    for mark, k in (("MARK run 0 on 0", 0), ("MARK run 1 on 0", 0), ("MARK run 2 on 1", 1)):
        lines = parts[mark]
        record = lines.index(f"cuEventRecord({event}) on caller stream {k}")
        assert lines[record + 1] == f"cuStreamWaitEvent({event}, 0)", lines  # the session's own stream
        launches = [i for i, line in enumerate(lines) if line.startswith(("cuGraphLaunch", "cuLaunchKernel"))]
        assert launches and min(launches) > record + 1, lines
        assert not any("caller stream" in line for line in lines[record + 1:]), lines
        assert lines[-1] == "cuStreamSynchronize", lines
    older = parts["MARK older runtime"]
    assert not any(line.startswith(("cuEventRecord", "cuStreamWaitEvent")) for line in older), older
    printed = result.stdout.splitlines()
    assert printed.count("torch stream synchronize") == 1, printed
    assert printed[printed.index("torch stream synchronize") - 1] == "MARK older runtime", printed


def test_a_run_after_a_stream_is_refused_on_the_cpu(runtime_build, package):
    """aotpack_session_run_after on a CPU session: UNSUPPORTED, in words that name the call to use instead; on no
    session at all: INVALID_ARGUMENT."""
    path, _ = package
    result = run_python(
        runtime_build,
        QUEUE + f"""
session = rt.Model({str(path)!r}).session()
for handle in (session._handle, None):
    try:
        rt._check(session._lib.aotpack_session_run_after(handle, None, 0, streams[0]))
        print("ran")
    except rt.AotpackError as e:
        print(e.code.name, e)
""",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    refused = ("UNSUPPORTED aotpack_session_run_after orders a run after a CUDA stream, and this session runs on the "
               "CPU: call aotpack_session_run")
    assert result.stdout.splitlines() == [refused, "INVALID_ARGUMENT session is NULL"], result.stdout


def test_what_cannot_be_queued_is_refused_in_words(runtime_build, package, tmp_path):
    """enqueue on a host-I/O session, on a CPU session, with something that is not a stream, or with an input out of
    its range is refused before anything is queued; a launch the driver refuses midway fails the call, which waits for
    what it queued, and the session queues the next run."""
    path, _ = package
    result = run_python(
        runtime_build,
        QUEUE + f"""
model = rt.Model({str(path)!r})
x = alloc(16 * 8 * 4)
device = model.session(device="cuda", io="device", cuda_graphs=False)
for session, inputs, stream in ((model.session(device="cuda"), [Dev(x, (3, 8))], streams[0]),
                                (model.session(), [Dev(x, (3, 8))], streams[0]),
                                (device, [Dev(x, (3, 8))], "stream 0"),
                                (device, [Dev(x, (17, 8))], streams[0]),
                                (device, [Dev(x, (3, 8))], streams[0])):  # FAKE_CUDA_FAIL_LAUNCH
    try:
        session.enqueue(inputs, streams[0] if stream is None else stream)
        print("queued")
    except rt.AotpackError as e:
        print(e.code.name, e)
(out,) = device.enqueue([Dev(x, (3, 8))], streams[0])
device.synchronize()
print("then", out.shape)
""",
        FAKE_CUDA_FAIL_LAUNCH="1",
        FAKE_CUDA_TRACE=str(tmp_path / "trace.txt"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("INVALID_ARGUMENT aotpack_session_enqueue needs a session with device I/O (io_memory "
                               "AOTPACK_MEMORY_DEVICE)"), lines
    assert lines[1].startswith("UNSUPPORTED aotpack_session_enqueue queues a run on a CUDA stream, and this session "
                               "runs on the CPU: call aotpack_session_run"), lines
    assert lines[2] == ("INVALID_ARGUMENT stream must be a CUDA stream (an object with cuda_stream, or its handle as "
                        "an int), not str"), lines
    assert lines[3].startswith('OUT_OF_RANGE input "x" dim 0 (n) = 17 is outside the declared range 1..16'), lines
    assert lines[4].split(" ", 1)[1].startswith("launching cuda step 0 (kernel "), lines
    assert "CUDA_ERROR_FAKE (700" in lines[4], lines
    assert lines[5] == "then (3, 4)", lines
    trace = (tmp_path / "trace.txt").read_text().splitlines()
    refused = next(i for i, line in enumerate(trace) if line.startswith("cuLaunchKernel("))
    assert trace[refused + 1] == "cuStreamSynchronize on caller stream 0", trace[refused:]
