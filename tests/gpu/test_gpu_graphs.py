"""CUDA graphs on a GPU: a session records a graph at each new shape and replays it after; replays must give the
graph-off results bit for bit, at many shapes, through eviction from a small cache, with device inputs at
changing addresses, in concurrent sessions, and every check (ranges, pointers, kernels' index checks) must work
under replay. tests/runtime/test_runtime_fake_cuda.py checks the driver calls of the same mechanics."""

from __future__ import annotations

import ctypes
import random
import subprocess
import threading

import numpy as np
import pytest
import torch
from aotpack.exporter import ModelSpec
from gpu_helpers import HERE, compare, export_cuda
from torch import nn

MAX_N = 300


class Tokens(nn.Module):
    """Token ids in (an embedding: its index check), a few kernels, two outputs."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.fc = nn.Linear(32, 48)

    def forward(self, ids):
        h = torch.relu(self.fc(self.emb(ids)))
        return h.softmax(-1), h.sum(0)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory, cuda_arch):
    torch.manual_seed(0)
    spec = ModelSpec(HERE, Tokens().eval(), (torch.randint(0, 50, (7,)),), ("ids",), {"ids": {0: "n"}},
                     {"n": (1, MAX_N)})
    return spec, export_cuda(spec, tmp_path_factory.mktemp("graphs") / "tokens.aotpack", cuda_arch)


@pytest.fixture(scope="module")
def model(tokens, rt):
    return rt.Model(tokens[1].path)


def ids_of(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 50, (n,), generator=torch.Generator().manual_seed(seed))


def device_outputs(session, x: torch.Tensor) -> list[np.ndarray]:
    return [o.to_torch().cpu().numpy() for o in session.run([x])]


def assert_each_run_reads_its_input(graphs, direct, inputs) -> None:
    """Each input through the graphed session is the graph-off session's result bit for bit, and (the inputs
    differing) consecutive results differ: no replay read an earlier run's input."""
    results = []
    for k, x in enumerate(inputs):
        torch.cuda.synchronize()
        got = device_outputs(graphs, x)
        for a, b in zip(got, device_outputs(direct, x)):
            np.testing.assert_array_equal(a, b, err_msg=f"input {k} at {x.data_ptr():#x}")
        results.append(got[0])
    assert all(not np.array_equal(results[i], results[i + 1]) for i in range(len(results) - 1))


def test_replays_are_bit_identical_to_graph_off_runs_across_many_shapes(tokens, model):
    spec, result = tokens
    graphs = model.session(device="cuda", io="device")
    direct = model.session(device="cuda", io="device", cuda_graphs=False)
    host_graphs = model.session(device="cuda")
    host_direct = model.session(device="cuda", cuda_graphs=False)
    shapes = [1, 2, 3, 17, 64, 127, 128, 129, 255, MAX_N] + random.Random(0).sample(range(1, MAX_N + 1), 30)
    order = shapes + shapes[::-1] + shapes  # each shape captured once, then replayed twice
    for k, n in enumerate(order):
        x = ids_of(n, seed=k).cuda()
        torch.cuda.synchronize()
        expected = device_outputs(direct, x)
        for a, b in zip(device_outputs(graphs, x), expected):
            np.testing.assert_array_equal(a, b, err_msg=f"device I/O, n={n}, run {k}")
        host = x.cpu().numpy()
        for a, b, c in zip(host_graphs.run([host]), host_direct.run([host]), expected):
            np.testing.assert_array_equal(a, b, err_msg=f"host I/O, n={n}, run {k}")
            np.testing.assert_array_equal(a, c, err_msg=f"host vs device I/O, n={n}, run {k}")
        if k < 3:  # and right, not only the same
            with torch.no_grad():
                eager = list(spec.model(x.cpu()))
            compare(host_graphs.run([host]), eager, result.manifest["signature"], f"n={n}")


def test_a_small_cache_evicts_and_stays_right(model):
    graphs = model.session(device="cuda", io="device", cuda_graph_cache_size=3)
    direct = model.session(device="cuda", io="device", cuda_graphs=False)
    shapes = [5, 9, 33, 5, 100, 9, 250, 33, 5, 1, 100, 300, 250, 5]  # hits, misses, and shapes evicted and back
    for k, n in enumerate(shapes * 2):
        x = ids_of(n, seed=100 + k).cuda()
        torch.cuda.synchronize()
        for a, b in zip(device_outputs(graphs, x), device_outputs(direct, x)):
            np.testing.assert_array_equal(a, b, err_msg=f"n={n}, run {k}")


def test_device_inputs_at_changing_addresses_are_read_each_run(model):
    """Same shape, new tensors (new data at new addresses, views into larger buffers): a replay reads each run's
    input, never the pointer of the run that recorded the graph."""
    graphs = model.session(device="cuda", io="device")
    direct = model.session(device="cuda", io="device", cuda_graphs=False)
    n = 40
    big = torch.zeros(4 * n + 64, dtype=torch.int64, device="cuda")
    inputs = [ids_of(n, seed=s).cuda() for s in range(5)]
    for offset in (0, 2, 8, 2 * n):  # 16-byte aligned views (int64: 2 elements)
        big[offset : offset + n] = ids_of(n, seed=50 + offset).cuda()
        inputs.append(big[offset : offset + n])
    assert_each_run_reads_its_input(graphs, direct, inputs)
    del inputs[0]  # the recording run's input is freed; later replays must not read it
    torch.cuda.empty_cache()
    x = ids_of(n, seed=999).cuda()
    torch.cuda.synchronize()
    for a, b in zip(device_outputs(graphs, x), device_outputs(direct, x)):
        np.testing.assert_array_equal(a, b)


def test_an_input_buffer_kept_from_run_to_run_is_read_in_place_each_run(model):
    """One input buffer, new contents each run (as a service that binds its buffers once): the shape's graph reads
    it in place, and every replay sees the contents of its own run; the alternating second buffer's runs replay
    the graph that reads the session's copy. Each result is the graph-off session's bit for bit."""
    graphs = model.session(device="cuda", io="device")
    direct = model.session(device="cuda", io="device", cuda_graphs=False)
    n = 24
    kept, other = torch.empty(n, dtype=torch.int64, device="cuda"), torch.empty(n, dtype=torch.int64, device="cuda")

    def refilled():  # other, kept, kept, other, ...: both kinds of graph, each replayed
        for k in range(6):
            x = kept if k % 3 else other
            x.copy_(ids_of(n, seed=100 + k))
            yield x

    assert_each_run_reads_its_input(graphs, direct, refilled())


def test_checks_under_replay(model, rt):
    """At a shape whose graph is recorded: an out-of-range input is refused with its message, a bad pointer is
    refused before the replay, a kernel's index check is reported, and the session goes on."""
    session = model.session(device="cuda", io="device")
    good = torch.tensor([1, 2, 3], device="cuda")
    expected = device_outputs(model.session(device="cuda", io="device", cuda_graphs=False), good)
    for _ in range(2):
        session.run([good])  # recorded, then replayed
    with pytest.raises(rt.AotpackError) as info:
        session.run([torch.zeros(MAX_N + 1, dtype=torch.int64, device="cuda")])
    assert info.value.code == rt.StatusCode.OUT_OF_RANGE
    assert str(info.value) == f'input "ids" dim 0 (n) = {MAX_N + 1} is outside the declared range 1..{MAX_N}'
    base = torch.zeros(8, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    dims = (ctypes.c_int64 * 1)(3)
    misaligned = rt._Tensor(4, 1, dims, base.data_ptr() + 4)  # int64 ids at a 4-byte offset
    with pytest.raises(rt.AotpackError, match="is not 16-byte aligned"):
        rt._check(rt.lib().aotpack_session_run(session._handle, ctypes.byref(misaligned), 1))
    for _ in range(2):  # the bad index at the recorded shape: the flag its kernel wrote in host memory reports it
        with pytest.raises(rt.AotpackError, match="outside") as info:
            session.run([torch.tensor([1, 2, 99], device="cuda")])
        assert info.value.code == rt.StatusCode.INVALID_ARGUMENT
    for a, b in zip(device_outputs(session, good), expected):  # flags cleared: the next replay is fine
        np.testing.assert_array_equal(a, b)
    direct = model.session(device="cuda", io="device", cuda_graphs=False)  # the flags without graphs: the same
    with pytest.raises(rt.AotpackError, match="outside"):
        direct.run([torch.tensor([1, 2, 99], device="cuda")])
    for a, b in zip(device_outputs(direct, good), expected):
        np.testing.assert_array_equal(a, b)
    host = model.session(device="cuda")
    host.run([np.array([4, 5, 6])])
    with pytest.raises(rt.AotpackError, match="outside"):
        host.run([np.array([4, 5, 60])])
    np.testing.assert_array_equal(host.run([good.cpu().numpy()])[0], expected[0])


def test_concurrent_sessions_with_graphs(model):
    """Threads, one session each, recording and replaying at the same time on one model."""
    shapes = [3, 50, 3, 120, 50, 300, 3, 120]
    inputs = [ids_of(n, seed=200 + k).cuda() for k, n in enumerate(shapes)]
    direct = model.session(device="cuda", io="device", cuda_graphs=False)
    torch.cuda.synchronize()
    expected = [device_outputs(direct, x) for x in inputs]
    errors: list[str] = []

    def work(t: int) -> None:
        try:
            session = model.session(device="cuda", io="device", cuda_graph_cache_size=2 + t % 3)
            for r in range(6):
                for k in range(len(inputs)):
                    k = (k + t + r) % len(inputs)
                    got = device_outputs(session, inputs[k])
                    for a, b in zip(got, expected[k]):
                        if not np.array_equal(a, b):
                            errors.append(f"thread {t} round {r} input {k}: differs")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:5]


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "no_graphs"])
def test_runs_queued_on_a_torch_stream_follow_its_work_and_match_waiting_runs(model, rt, graphs):
    """Session.enqueue on a side stream whose inputs are still being written there (no wait before the call), runs
    queued back to back with each output copied on that stream before the next run: each copy is the waiting
    session's result bit for bit; then a queued run on torch's current stream, and a failed index check raised by
    synchronize() and, queued again, by the next run(), which does not run; the session goes on."""
    queued = model.session(device="cuda", io="device", cuda_graphs=graphs)
    direct = model.session(device="cuda", io="device", cuda_graphs=False)
    side = torch.cuda.Stream()
    shapes = [24, 24, 24, 7, 24, 300, 7]
    host = [ids_of(n, seed=300 + k) for k, n in enumerate(shapes)]
    kept = torch.empty(MAX_N, dtype=torch.int64, device="cuda")
    copies = []
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        for k, ids in enumerate(host):
            x = kept[: ids.numel()] if k % 2 == 0 else torch.empty(ids.numel(), dtype=torch.int64, device="cuda")
            x.copy_(ids.pin_memory(), non_blocking=True)  # written on the side stream: enqueue must follow it
            outputs = queued.enqueue([x], side)
            copies.append([o.to_torch() for o in outputs])  # on the side stream, before the next run
    queued.synchronize()
    side.synchronize()
    for k, ids in enumerate(host):
        expected = device_outputs(direct, ids.cuda())
        for a, b in zip([c.cpu().numpy() for c in copies[k]], expected):
            np.testing.assert_array_equal(a, b, err_msg=f"queued run {k} (n={ids.numel()})")
    good = ids_of(24, seed=1).cuda()
    (out, _) = queued.enqueue([good])  # torch's current stream
    np.testing.assert_array_equal(out.to_torch().cpu().numpy(), device_outputs(direct, good)[0])
    bad = torch.tensor([1, 2, 99], device="cuda")
    torch.cuda.synchronize()  # written on the default stream, read on the side one
    queued.enqueue([bad], side)
    with pytest.raises(rt.AotpackError, match="outside") as info:
        queued.synchronize()
    assert info.value.code == rt.StatusCode.INVALID_ARGUMENT
    queued.synchronize()  # reported once
    queued.enqueue([bad])
    with pytest.raises(rt.AotpackError, match="before this one failed, and this one did not start"):
        queued.run([good])
    for a, b in zip(device_outputs(queued, good), device_outputs(direct, good)):
        np.testing.assert_array_equal(a, b)


def test_the_tool_reports_capture_and_replay(tokens, runtime_build):
    done = subprocess.run([str(runtime_build / "aotpack-run"), str(tokens[1].path), "--device", "cuda", "--repeat",
                           "20", "--timings", "--sym", "n=128"], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "(capture)" in done.stdout and "(replay)" in done.stdout and "CUDA graphs" in done.stdout, done.stdout
    print(done.stdout, done.stderr)  # the part timings, for the record
    for part in ("digests", "cuda driver", "cuda context", "cuda modules", "cuda weights upload",
                 "cuda graph capture", "cuda graph instantiate", "open to first result"):
        assert part in done.stderr, done.stderr
