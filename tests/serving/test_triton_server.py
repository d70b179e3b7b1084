"""libtriton_aotpack.so in a real Triton Inference Server (2.51.0, from nvidia-pytriton), on this machine's CPU:
a repository written by `aotpack publish --format triton`, checked through tritonclient over HTTP and gRPC
against aotpack's own runtime (aotpack.runtime) on the same inputs."""

from __future__ import annotations

import re
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from .helpers import cli

RNG = np.random.default_rng(15)


def _publish(package: Path, repository: Path, *options: str) -> None:
    staging = repository.parent / f"staging-{package.stem}"
    cli("publish", str(package), "--format", "triton", "--out", str(staging), *options)
    for model in staging.iterdir():
        shutil.move(str(model), repository / model.name)
    staging.rmdir()


@pytest.fixture(scope="module")
def repository(tmp_path_factory, serving_packages) -> Path:
    repo = tmp_path_factory.mktemp("triton") / "repository"
    repo.mkdir()
    # A 20 ms queue delay gathers concurrent clients' requests into one execution even on a busy machine.
    _publish(serving_packages["mlp"], repo, "--instance-kind", "cpu", "--instances", "2", "--dynamic-batching",
             "--max-queue-delay-us", "20000")
    _publish(serving_packages["block"], repo, "--instance-kind", "cpu", "--dynamic-batching",
             "--max-queue-delay-us", "20000", "--threads", "2")
    _publish(serving_packages["bag"], repo, "--instance-kind", "cpu", "--dynamic-batching",
             "--max-queue-delay-us", "300000")
    # A model folder with only the backend named: the backend fills the configuration in from the package.
    (repo / "mlp_auto" / "1").mkdir(parents=True)
    shutil.copyfile(serving_packages["mlp"], repo / "mlp_auto" / "1" / "model.aotpack")
    (repo / "mlp_auto" / "config.pbtxt").write_text('backend: "aotpack"\ninstance_group [ { kind: KIND_CPU } ]\n')
    (repo / "seq_auto" / "1").mkdir(parents=True)
    shutil.copyfile(serving_packages["seq"], repo / "seq_auto" / "1" / "model.aotpack")
    (repo / "seq_auto" / "config.pbtxt").write_text('backend: "aotpack"\ninstance_group [ { kind: KIND_CPU } ]\n')
    # A damaged package.
    shutil.copytree(repo / "mlp_auto", repo / "mlp_damaged")
    data = bytearray((repo / "mlp_damaged" / "1" / "model.aotpack").read_bytes())
    data[len(data) // 2] ^= 0x01
    (repo / "mlp_damaged" / "1" / "model.aotpack").write_bytes(bytes(data))
    # A backend parameter out of its range.
    shutil.copytree(repo / "mlp_auto", repo / "mlp_bad_parameter")
    (repo / "mlp_bad_parameter" / "config.pbtxt").write_text(
        'backend: "aotpack"\ninstance_group [ { kind: KIND_CPU } ]\n'
        'parameters [ { key: "aotpack.cuda_pdl" value: { string_value: "2" } } ]\n')
    # A configuration that contradicts the package.
    shutil.copytree(repo / "mlp", repo / "mlp_bad")
    text = (repo / "mlp_bad" / "config.pbtxt").read_text().replace('name: "mlp"', 'name: "mlp_bad"')
    (repo / "mlp_bad" / "config.pbtxt").write_text(text.replace("dims: [ 32 ]", "dims: [ 31 ]", 1))
    return repo


@pytest.fixture(scope="module")
def server(tritonserver_binary, repository, backend_dir, tmp_path_factory):
    from aotpack.triton_server import TritonServer

    log = tmp_path_factory.mktemp("triton_log") / "tritonserver.log"
    with TritonServer(repository, backend_dir, log, load=("mlp", "block", "bag")) as s:
        yield s


@pytest.fixture(scope="module")
def runtime_outputs(serving_packages):
    """name -> f(inputs) -> the runtime's outputs, through one CPU session per package."""
    from aotpack import runtime

    sessions = {name: runtime.Model(path).session() for name, path in serving_packages.items()}
    lock = threading.Lock()

    def run(name: str, *inputs: np.ndarray) -> list[np.ndarray]:
        with lock:  # a session runs on one thread at a time
            return sessions[name].run(list(inputs))
    return run


def _http(server):
    import tritonclient.http as httpclient

    return httpclient.InferenceServerClient(server.http_url, concurrency=8)


def _grpc(server):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(server.grpc_url)


def _infer(client, protocol: str, model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...] = ("output",)):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import np_to_triton_dtype

    module = httpclient if protocol == "http" else grpcclient
    tensors = []
    for name, value in inputs.items():
        tensor = module.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    result = client.infer(model, tensors, outputs=[module.InferRequestedOutput(o) for o in outputs])
    return [result.as_numpy(o) for o in outputs]


def _model_stats(client, model: str) -> dict:
    return client.get_inference_statistics(model)["model_stats"][0]


# ---- server, models, metadata ------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_server_and_models_are_ready_with_their_metadata(server, protocol):
    client = _http(server) if protocol == "http" else _grpc(server)
    assert client.is_server_live() and client.is_server_ready()
    for model in ("mlp", "block", "bag"):
        assert client.is_model_ready(model), server.log()[-3000:]
    meta = client.get_model_metadata("mlp")
    if protocol == "grpc":
        from google.protobuf.json_format import MessageToDict

        meta = MessageToDict(meta, preserving_proto_field_name=True)
    assert meta["platform"] == "aotpack" and meta["versions"] == ["1"]
    assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in meta["inputs"]] == [("input", "FP32", [-1, 32])]
    assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in meta["outputs"]] == [("output", "FP32", [-1, 10])]


def test_the_server_runs_the_published_configuration(server):
    config = _grpc(server).get_model_config("block", as_json=True)["config"]
    assert config["backend"] == "aotpack" and config["max_batch_size"] == 16
    assert [int(d) for d in config["input"][0]["dims"]] == [-1, 64]
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 20000


def test_the_backend_fills_in_a_configuration_that_leaves_the_tensors_out(server):
    client = _http(server)
    client.load_model("mlp_auto")
    config = client.get_model_config("mlp_auto")
    assert config["max_batch_size"] == 64  # the batch symbol's maximum
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("input", "TYPE_FP32", [32])]
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["output"]] == [("output", "TYPE_FP32", [10])]
    client.unload_model("mlp_auto")


def test_a_package_without_a_batch_symbol_is_filled_in_without_batching(server, runtime_outputs):
    client = _http(server)
    client.load_model("seq_auto")
    config = client.get_model_config("seq_auto")
    assert config["max_batch_size"] == 0  # seq is dim 1; dim 0 is the fixed 2
    assert [(t["name"], t["dims"]) for t in config["input"]] == [("x", [2, -1, 64])]
    assert [(t["name"], t["dims"]) for t in config["output"]] == [("output", [2, -1, 64])]
    x = RNG.standard_normal((2, 100, 64)).astype(np.float32)
    (served,) = _infer(client, "http", "seq_auto", {"x": x})
    np.testing.assert_array_equal(served, runtime_outputs("seq", x)[0])
    client.unload_model("seq_auto")


def test_a_configuration_that_contradicts_the_package_does_not_load(server):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException) as e:
        _http(server).load_model("mlp_bad")
    assert "input 'input': dims[0] is 31 but the package's dim 1 is 32" in str(e.value)


def test_a_backend_parameter_out_of_its_range_does_not_load(server):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException) as e:
        _http(server).load_model("mlp_bad_parameter")
    assert "parameter aotpack.cuda_pdl is '2': expected an integer in 0..1" in str(e.value), str(e.value)


def test_a_damaged_package_does_not_load_and_says_why(server):
    from tritonclient.utils import InferenceServerException

    client = _http(server)
    with pytest.raises(InferenceServerException) as e:
        client.load_model("mlp_damaged")
    assert "model mlp_damaged: " in str(e.value) and "sha256" in str(e.value), str(e.value)
    assert client.is_server_live() and client.is_model_ready("mlp")  # (strict readiness: not "ready" now)


def test_only_the_backend_entry_points_are_exported(backend_dir):
    import subprocess

    nm = subprocess.run(["nm", "-D", "--defined-only", str(backend_dir / "aotpack" / "libtriton_aotpack.so")],
                        capture_output=True, text=True, check=True).stdout
    exported = sorted(line.split()[-1] for line in nm.splitlines() if line.split()[1] in "TtDdBbRrVWi")
    assert exported == sorted(f"TRITONBACKEND_{n}" for n in (
        "Initialize", "Finalize", "ModelInitialize", "ModelFinalize", "ModelInstanceInitialize",
        "ModelInstanceFinalize", "ModelInstanceExecute"))


# ---- inference --------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_inference_equals_the_runtime_at_several_lengths(server, runtime_outputs, protocol):
    client = _http(server) if protocol == "http" else _grpc(server)
    for batch, seq in [(1, 1), (2, 7), (1, 33), (3, 64)]:  # seq 1..64: the minimum, inner points, the maximum
        x = RNG.standard_normal((batch, seq, 64)).astype(np.float32)
        (served,) = _infer(client, protocol, "block", {"x": x})
        (direct,) = runtime_outputs("block", x)
        assert served.shape == (batch, seq, 64)
        np.testing.assert_array_equal(served, direct)  # one request alone: the same kernels on the same shape
    for batch in (1, 5, 64):
        x = RNG.standard_normal((batch, 32)).astype(np.float32)
        (served,) = _infer(client, protocol, "mlp", {"input": x})
        np.testing.assert_array_equal(served, runtime_outputs("mlp", x)[0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_length_outside_the_range_gets_the_runtimes_message(server, protocol):
    from tritonclient.utils import InferenceServerException

    client = _http(server) if protocol == "http" else _grpc(server)
    with pytest.raises(InferenceServerException) as e:
        _infer(client, protocol, "block", {"x": np.ones((1, 65, 64), np.float32)})
    assert 'input "x" dim 1 (seq) = 65 is outside the declared range 1..64' in str(e.value)
    assert e.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    # The model still serves.
    (served,) = _infer(client, protocol, "block", {"x": np.ones((1, 3, 64), np.float32)})
    assert served.shape == (1, 3, 64)


def test_a_failing_request_in_a_merged_batch_fails_alone(server, runtime_outputs):
    """Eight concurrent requests to one execution (300 ms queue delay); one holds an id the embedding refuses.
    The merged run fails, each request is run alone: seven answers equal the runtime's, one error."""
    client = _http(server)
    before = _model_stats(client, "bag")
    ids = [RNG.integers(0, 50, size=(1 + i % 3, 8)).astype(np.int64) for i in range(8)]
    ids[5][0, 3] = 77
    import tritonclient.http as httpclient

    pending = []
    for x in ids:
        tensor = httpclient.InferInput("ids", list(x.shape), "INT64")
        tensor.set_data_from_numpy(x)
        pending.append(client.async_infer("bag", [tensor]))
    from tritonclient.utils import InferenceServerException

    for i, (x, request) in enumerate(zip(ids, pending)):
        if i == 5:
            with pytest.raises(InferenceServerException) as e:
                request.get_result()
            assert "an index is outside 0..50-1" in str(e.value)
        else:
            np.testing.assert_allclose(request.get_result().as_numpy("output"), runtime_outputs("bag", x)[0],
                                       rtol=1e-5, atol=1e-6)
    after = _model_stats(client, "bag")
    answered_rows = sum(len(x) for i, x in enumerate(ids) if i != 5)
    assert int(after["inference_count"]) - int(before.get("inference_count", 0)) == answered_rows
    merged = [int(n) for n in re.findall(r"instance bag_0_0: a merged run of (\d+) requests failed", server.log())]
    assert merged and max(merged) >= 2, "the requests never reached the backend together"


def test_eight_client_threads_are_batched_by_the_server(server, runtime_outputs):
    client = _http(server)
    before = _model_stats(client, "mlp")
    failures: list[str] = []
    requests_per_thread = 12

    def client_thread(seed: int) -> None:
        rng = np.random.default_rng(seed)
        own = _http(server)
        for _ in range(requests_per_thread):
            x = rng.standard_normal((int(rng.integers(1, 5)), 32)).astype(np.float32)
            (served,) = _infer(own, "http", "mlp", {"input": x})
            expected = runtime_outputs("mlp", x)[0]
            if served.shape != expected.shape or not np.allclose(served, expected, rtol=1e-5, atol=1e-6):
                failures.append(f"thread {seed}: batch {len(x)} differs by {np.abs(served - expected).max()}")

    threads = [threading.Thread(target=client_thread, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    after = _model_stats(client, "mlp")
    requests = int(after["inference_count"]) - int(before.get("inference_count", 0))
    executions = int(after["execution_count"]) - int(before.get("execution_count", 0))
    assert requests >= 8 * requests_per_thread  # rows: each request has 1..4
    assert executions < 8 * requests_per_thread, f"{executions} executions for {8 * requests_per_thread} requests"
    batched = [b for b in after["batch_stats"] if int(b["batch_size"]) > 4]  # more rows than one request has
    assert batched, after["batch_stats"]


def test_two_cpu_instances_each_hold_a_session(server):
    config = _http(server).get_model_config("mlp")
    assert config["instance_group"][0]["count"] == 2
    log = server.log()
    assert "instance mlp_0_0 (CPU): a session of model mlp, 1 CPU thread(s), batching on batch" in log
    assert "instance mlp_0_1 (CPU): a session of model mlp, 1 CPU thread(s), batching on batch" in log
    assert "instance block_0_0 (CPU): a session of model block, 2 CPU thread(s), batching on batch" in log  # --threads


def test_twenty_load_unload_cycles_do_not_grow_memory(server, runtime_outputs):
    client = _http(server)
    x = RNG.standard_normal((3, 32)).astype(np.float32)
    expected = runtime_outputs("mlp", x)[0]

    def cycle() -> None:
        client.load_model("mlp_auto")
        (served,) = _infer(client, "http", "mlp_auto", {"input": x})
        np.testing.assert_array_equal(served, expected)
        client.unload_model("mlp_auto")
        deadline = time.monotonic() + 30
        while client.is_model_ready("mlp_auto") and time.monotonic() < deadline:
            time.sleep(0.05)

    for _ in range(5):  # warm-up: the allocator's and the server's first-time growth
        cycle()
    warm = server.rss_bytes()
    for _ in range(15):
        cycle()
    grown = server.rss_bytes() - warm
    print(f"tritonserver RSS after 5 cycles {warm / 2**20:.1f} MiB, after 20 {(warm + grown) / 2**20:.1f} MiB")
    assert grown < 4 * 2**20, f"tritonserver grew by {grown / 2**20:.1f} MiB over 15 load/unload cycles"


def test_the_standard_library_client_agrees_with_tritonclient(server, runtime_outputs):
    """aotpack.triton_server.HttpClient (binary tensors over HTTP) is what the GPU test and the benchmark use
    where tritonclient is not installed; here it is checked against the runtime and the server's refusals."""
    from aotpack.errors import AotpackError
    from aotpack.triton_server import HttpClient

    client = HttpClient(server.http_url)
    x = RNG.standard_normal((4, 9, 64)).astype(np.float32)
    served = client.infer("block", {"x": x}, ("output",))["output"]
    np.testing.assert_array_equal(served, runtime_outputs("block", x)[0])
    assert client.config("block")["max_batch_size"] == 16 and client.ready("block")
    with pytest.raises(AotpackError, match=r"HTTP 400: .*dim 1 \(seq\) = 65 is outside the declared range 1..64"):
        client.infer("block", {"x": np.ones((1, 65, 64), np.float32)}, ("output",))
    assert int(client.statistics("block")["inference_count"]) > 0
    client.close()


def test_the_cli_prints_the_backend_directory(backend_dir):
    result = cli("--triton-backend-dir")
    folder = Path(result.stdout.strip())
    assert (folder / "aotpack" / "libtriton_aotpack.so").is_file()
    assert (folder / "aotpack" / "libaotpack.so.0").is_file()  # its SONAME: the backend's RUNPATH is $ORIGIN
