"""`aotpack publish`: each layout read back by its real consumer (MLflow; a registry server and clients
on loopback; Triton's own ModelConfig schema)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from aotpack.packages.reader import read_package

from .exports import AOTPACK, load_mlp, rel_error, run


def _publish(package: Path, format_name: str, out: Path, *extra: str) -> None:
    result = run([*AOTPACK, "publish", str(package), "--format", format_name, "--out", str(out), *extra])
    assert result.returncode == 0, result.stderr
    assert read_package(package).digest in result.stdout


def _eager_points():
    gen = torch.Generator().manual_seed(3)
    model = load_mlp()
    for batch in (1, 33, 64):  # the range's ends and an inner point
        x = torch.randn(batch, 32, generator=gen)
        with torch.no_grad():
            yield x.numpy(), model(x).numpy()


# ---- MLflow ------------------------------------------------------------------------------------------


def test_mlflow_model_loads_and_predicts_like_eager(mlp_package, tmp_path, runtime_build):
    import mlflow.pyfunc

    out = tmp_path / "mlflow-model"
    _publish(mlp_package, "mlflow", out)
    model = mlflow.pyfunc.load_model(str(out))
    flavor = model.metadata.flavors["aotpack"]
    package = read_package(mlp_package)
    assert flavor["digest"] == package.digest and flavor["package_version"] == "1.0.0"
    assert flavor["signature"]["symbols"] == [{"name": "batch", "min": 1, "max": 64}]  # the ranges MLflow lacks
    assert model.metadata.signature.inputs.to_dict() == [
        {"name": "input", "type": "tensor", "tensor-spec": {"dtype": "float32", "shape": (-1, 32)}}]
    assert model.metadata.metadata == {"license": "MIT", "source.revision": "0123abc"}
    assert (out / "data" / "mlp.aotpack").read_bytes() == mlp_package.read_bytes()
    for x, ref in _eager_points():
        y = model.predict(x)
        assert y.shape == ref.shape and rel_error(y, ref) <= 1e-5
        assert rel_error(model.predict({"input": x}), ref) <= 1e-5
    # A server may predict from several threads: each gets its own runtime session.
    points = list(_eager_points())
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda point: model.predict(point[0]), points * 2))
    assert all(rel_error(y, ref) <= 1e-5 for y, (_, ref) in zip(results, points * 2))


def test_mlflow_logs_to_a_file_store_registry(mlp_package, tmp_path, runtime_build, monkeypatch):
    import mlflow
    from aotpack.publish import mlflow_flavor

    # MLflow 3 keeps the file store in maintenance mode behind this switch; no server is needed.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = (tmp_path / "mlruns").as_uri()
    mlflow.set_tracking_uri(store)
    mlflow.set_registry_uri(store)
    try:
        with mlflow.start_run():
            info = mlflow_flavor.log_model(mlp_package, registered_model_name="mlp")
        assert info.registered_model_version == 1
        version = mlflow.MlflowClient().get_model_version("mlp", "1")
        assert version.name == "mlp" and version.status == "READY"
        model = mlflow.pyfunc.load_model("models:/mlp/1")
        assert model.metadata.flavors["aotpack"]["digest"] == read_package(mlp_package).digest
        for x, ref in _eager_points():
            assert rel_error(model.predict(x), ref) <= 1e-5
    finally:
        mlflow.set_tracking_uri("")
        mlflow.set_registry_uri("")


# ---- OCI / CNCF ModelPack ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def registry(tmp_path):
    """The CNCF distribution registry (Debian's docker-registry) on 127.0.0.1, stopped after the test."""
    binary = shutil.which("docker-registry")
    assert binary, "Debian's docker-registry is needed for this test: `make registry-tools` installs it"
    port = _free_port()
    config = tmp_path / "registry.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
                      f"{tmp_path / 'registry-data'}\nhttp:\n  addr: 127.0.0.1:{port}\n")
    log = open(tmp_path / "registry.log", "w")  # noqa: SIM115  (open for the server's whole life)
    server = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:  # bounded: the server answers in well under a second here
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert server.poll() is None, (tmp_path / "registry.log").read_text()
                assert time.monotonic() < deadline, "docker-registry did not listen within 20 s"
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        log.close()


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_oci_layout_is_a_modelpack_artifact(mlp_package, tmp_path):
    out = tmp_path / "oci"
    _publish(mlp_package, "oci", out)
    package = read_package(mlp_package)
    assert json.loads((out / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((out / "index.json").read_text())
    (entry,) = index["manifests"]
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "1.0.0"
    manifest_blob = out / "blobs" / "sha256" / entry["digest"].removeprefix("sha256:")
    assert _sha256(manifest_blob) == entry["digest"]  # every blob is named by its digest
    manifest = json.loads(manifest_blob.read_text())
    assert manifest["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.cncf.model.config.v1+json"
    for descriptor in [manifest["config"], *manifest["layers"]]:
        blob = out / "blobs" / "sha256" / descriptor["digest"].removeprefix("sha256:")
        assert _sha256(blob) == descriptor["digest"] and blob.stat().st_size == descriptor["size"]
    manifest_layer, package_layer = manifest["layers"]
    assert manifest_layer["digest"] == package.digest  # the aotpack manifest layer's digest is the package digest
    assert manifest_layer["annotations"]["org.cncf.model.filepath"] == "manifest.json"
    assert package_layer["digest"] == _sha256(mlp_package)
    config = json.loads((out / "blobs" / "sha256" / manifest["config"]["digest"].removeprefix("sha256:")).read_text())
    assert config["descriptor"] == {"name": "mlp", "version": "1.0.0", "licenses": ["MIT"], "revision": "0123abc"}
    assert config["config"]["format"] == "aotpack" and config["config"]["precision"] == "fp32"
    assert config["modelfs"] == {"type": "layers", "diffIds": [manifest_layer["digest"], package_layer["digest"]]}
    ranges = json.loads(manifest["annotations"]["dev.aotpack.signature"])["symbols"]
    assert ranges == [{"name": "batch", "min": 1, "max": 64}]


def test_oci_push_to_a_registry_and_pull_back(mlp_package, tmp_path, registry):
    import oras.client

    skopeo = shutil.which("skopeo")
    assert skopeo, "Debian's skopeo is needed for this test: `make registry-tools` installs it"
    out = tmp_path / "oci"
    _publish(mlp_package, "oci", out)
    reference = f"{registry}/aotpack/mlp:1.0.0"
    pushed = subprocess.run([skopeo, "copy", "--dest-tls-verify=false", f"oci:{out}:1.0.0", f"docker://{reference}"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert pushed.returncode == 0, pushed.stderr

    raw = subprocess.run([skopeo, "inspect", "--raw", "--tls-verify=false", f"docker://{reference}"],
                         capture_output=True, timeout=60, check=False)
    assert raw.returncode == 0, raw.stderr
    (entry,) = json.loads((out / "index.json").read_text())["manifests"]
    assert "sha256:" + hashlib.sha256(raw.stdout).hexdigest() == entry["digest"]  # the registry kept it byte for byte

    client = oras.client.OrasClient(hostname=registry, insecure=True, tls_verify=False)
    remote = client.get_manifest(reference)
    assert remote["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    pulled = tmp_path / "pulled"
    files = sorted(Path(f).name for f in client.pull(target=reference, outdir=str(pulled)))
    assert files == ["manifest.json", "mlp.aotpack"]
    package = read_package(mlp_package)
    assert (pulled / "mlp.aotpack").read_bytes() == mlp_package.read_bytes()
    assert _sha256(pulled / "manifest.json") == package.digest
    assert read_package(pulled / "mlp.aotpack").digest == package.digest


# ---- Triton ------------------------------------------------------------------------------------------


def _triton_model_config():
    """Triton's ModelConfig message, from the generated model_config_pb2 that tritonclient ships (loaded
    by path: its package __init__ imports gRPC, which this check does not need)."""
    import tritonclient

    path = Path(tritonclient.__file__).parent / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_triton_repository_follows_the_format(mlp_package, tmp_path):
    from google.protobuf import text_format

    out = tmp_path / "repository"
    _publish(mlp_package, "triton", out, "--model-version", "3")
    package = read_package(mlp_package)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "mlp", "mlp/3", "mlp/3/model.aotpack", "mlp/config.pbtxt"]
    pb2 = _triton_model_config()
    # Parsing fails on any field, enum value or syntax that Triton's own schema does not have.
    config = text_format.Parse((out / "mlp" / "config.pbtxt").read_text(), pb2.ModelConfig())
    assert config.name == "mlp"  # Triton requires the model's folder name
    # batch is dim 0 of the input and the output: Triton's batch dim, so it leaves dims.
    assert config.backend == "aotpack" and config.max_batch_size == 64
    assert list(config.version_policy.specific.versions) == [3]
    assert (out / "mlp" / "3" / config.default_model_filename).read_bytes() == mlp_package.read_bytes()
    (inp,), (outp,) = config.input, config.output
    assert (inp.name, pb2.DataType.Name(inp.data_type), list(inp.dims)) == ("input", "TYPE_FP32", [32])
    assert (outp.name, pb2.DataType.Name(outp.data_type), list(outp.dims)) == ("output", "TYPE_FP32", [10])
    assert not config.instance_group and not config.HasField("dynamic_batching")
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params["aotpack.symbol.batch"] == "1..64"
    assert params["aotpack.package_digest"] == package.digest and params["aotpack.package_version"] == "1.0.0"
    assert json.loads(params["aotpack.signature"]) == package.manifest["signature"]


def test_triton_options_write_instance_groups_and_dynamic_batching(mlp_package, tmp_path):
    from google.protobuf import text_format

    pb2 = _triton_model_config()
    out = tmp_path / "batched"
    _publish(mlp_package, "triton", out, "--instance-kind", "cpu", "--instances", "3", "--dynamic-batching",
             "--max-queue-delay-us", "2500", "--threads", "4")
    config = text_format.Parse((out / "mlp" / "config.pbtxt").read_text(), pb2.ModelConfig())
    assert config.parameters["aotpack.num_threads"].string_value == "4"
    (group,) = config.instance_group
    assert (pb2.ModelInstanceGroup.Kind.Name(group.kind), group.count, list(group.gpus)) == ("KIND_CPU", 3, [])
    assert config.dynamic_batching.max_queue_delay_microseconds == 2500
    out = tmp_path / "unbatched"
    _publish(mlp_package, "triton", out, "--no-batching")
    config = text_format.Parse((out / "mlp" / "config.pbtxt").read_text(), pb2.ModelConfig())
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [-1, 32]


def test_triton_refuses_options_the_package_cannot_serve(mlp_package, tmp_path):
    for options, message in [(["--no-batching", "--dynamic-batching"], "the package has no batch symbol"),
                             (["--instance-kind", "gpu"], "the package has no CUDA kernels"),
                             (["--gpus", "0"], "--gpus needs --instance-kind gpu")]:
        out = tmp_path / "r"
        result = run([*AOTPACK, "publish", str(mlp_package), "--format", "triton", "--out", str(out), *options])
        assert result.returncode == 1 and message in result.stderr, result.stderr
        assert not out.exists()  # refused before anything is written
    result = run([*AOTPACK, "publish", str(mlp_package), "--format", "oci", "--out", str(tmp_path / "o"),
                  "--instances", "2"])
    assert result.returncode == 2 and "--instances: options of --format triton only" in result.stderr


def test_batch_symbol_rule():
    from aotpack.publish.triton import batch_symbol

    symbols = [{"name": "b", "min": 1, "max": 8}, {"name": "s", "min": 1, "max": 9}]

    def sig(inputs, outputs):
        return {"symbols": symbols, "inputs": [{"shape": s} for s in inputs], "outputs": [{"shape": s} for s in outputs]}

    assert batch_symbol(sig([["b", "s"], ["b", 4]], [["b", ["+", "s", -1]]]))["name"] == "b"
    assert batch_symbol(sig([["s", "b"]], [["s", "b"]]))["name"] == "s"  # any name: the dim decides
    assert batch_symbol(sig([["b", "b"]], [["b"]])) is None  # b elsewhere: rows are not independent
    assert batch_symbol(sig([["b", 4]], [["b", ["*", "b", 2]]])) is None  # an output size that uses b
    assert batch_symbol(sig([["b", 4]], [[4, "b"]])) is None  # an output not split by rows
    assert batch_symbol(sig([[2, "s"]], [[2, "s"]])) is None  # no symbol on dim 0
    assert batch_symbol(sig([["b", 4], [4]], [["b"]])) is None  # an input without the batch dim


# ---- refusals ---------------------------------------------------------------------------------------


def test_publish_refuses_a_damaged_package_and_a_used_folder(mlp_package, tmp_path):
    data = bytearray(mlp_package.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad = tmp_path / "bad.aotpack"
    bad.write_bytes(bytes(data))
    result = run([*AOTPACK, "publish", str(bad), "--format", "triton", "--out", str(tmp_path / "r")])
    assert result.returncode == 1 and "refusing to publish a damaged package" in result.stderr
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("x")
    result = run([*AOTPACK, "publish", str(mlp_package), "--format", "oci", "--out", str(used)])
    assert result.returncode == 1 and "exists and is not empty" in result.stderr
