"""libtriton_aotpack.so with a GPU instance group in a real Triton Inference Server: the CUDA half of
tests/serving. Skipped, saying why, without a GPU or without tritonserver (on a machine without network,
carry the server bundle: docs/serving.md, "On a GPU machine"). Uses only the standard library's HTTP client
(aotpack.triton_server.HttpClient), so tritonclient need not be installed there."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCK = REPO / "tests" / "serving" / "models" / "batched_block.py"


@pytest.fixture(scope="module")
def gpu_server(runtime_build, cuda_arch, tmp_path_factory):
    from aotpack.triton_server import TritonServer, server_binary

    if server_binary() is None:
        pytest.skip("GPU Triton test skipped: no tritonserver (run `make triton-server`, or unpack the server "
                    "bundle and set TRITON_HOME; docs/serving.md)")
    work = tmp_path_factory.mktemp("gpu_triton")
    package = work / "block.aotpack"
    repo = work / "repository"
    for args in (["export", str(BLOCK), "--target", "cpu,cuda", "--cuda-arch", str(cuda_arch), "--name", "block",
                  "-o", str(package), "-q"],
                 ["publish", str(package), "--format", "triton", "--out", str(repo), "--instance-kind", "gpu",
                  "--instances", "2", "--gpus", "0", "--dynamic-batching", "--max-queue-delay-us", "20000"]):
        result = subprocess.run([sys.executable, "-m", "aotpack.cli", *args], capture_output=True, text=True, cwd=REPO,
                                check=False)
        assert result.returncode == 0, result.stderr
    with TritonServer(repo, runtime_build / "triton_backends", work / "tritonserver.log", load=("block",)) as server:
        yield server, package
    shutil.rmtree(work, ignore_errors=True)


def test_gpu_instances_serve_what_the_runtime_computes_on_the_gpu(gpu_server):
    from aotpack import runtime
    from aotpack.triton_server import HttpClient

    server, package = gpu_server
    log = server.log()
    assert "instance block_0_0 (CUDA device 0): a session of model block," in log, log[-3000:]
    assert "instance block_0_1 (CUDA device 0): a session of model block," in log
    session = runtime.Model(package).session(device="cuda:0")
    client = HttpClient(server.http_url)
    rng = np.random.default_rng(0)
    for batch, seq in [(1, 1), (2, 17), (16, 64)]:
        x = rng.standard_normal((batch, seq, 64)).astype(np.float32)
        served = client.infer("block", {"x": x}, ("output",))["output"]
        np.testing.assert_allclose(served, session.run([x])[0], rtol=1e-5, atol=1e-6)  # the same shape and kernels


def test_gpu_instances_batch_eight_client_threads(gpu_server):
    from aotpack import runtime
    from aotpack.triton_server import HttpClient

    server, package = gpu_server
    before = HttpClient(server.http_url).statistics("block")
    model = runtime.Model(package)
    failures: list[str] = []
    lock = threading.Lock()
    reference = model.session(device="cuda:0")

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        client = HttpClient(server.http_url)
        for _ in range(10):
            x = rng.standard_normal((int(rng.integers(1, 3)), 32, 64)).astype(np.float32)
            served = client.infer("block", {"x": x}, ("output",))["output"]
            with lock:
                expected = reference.run([x])[0]
            if not np.allclose(served, expected, rtol=1e-4, atol=1e-5):
                failures.append(f"thread {seed}: differs by {np.abs(served - expected).max()}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    after = HttpClient(server.http_url).statistics("block")
    executions = int(after["execution_count"]) - int(before.get("execution_count", 0))
    assert executions < 80, f"{executions} executions for 80 requests: the server batched none"
