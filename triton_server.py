"""A local Triton Inference Server for tests and benchmarks: `tritonserver` from the nvidia-pytriton wheel
(`make triton-server` installs it under $TRITON_HOME), started on 127.0.0.1 with free ports and stopped by
its process id. Not part of serving itself: a deployment runs its own server (docs/serving.md).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from .errors import AotpackError

DEFAULT_HOME = Path.home() / ".cache" / "aotpack" / "tritonserver-pytriton-0.7.0"
BINARY = Path("pytriton") / "tritonserver" / "bin" / "tritonserver"


def server_binary() -> Path | None:
    """tritonserver under $TRITON_HOME (default: where `make triton-server` puts it), or None."""
    home = Path(os.environ.get("TRITON_HOME", DEFAULT_HOME))
    path = home / BINARY
    return path if path.is_file() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TritonServer:
    """One tritonserver process. Model control is explicit: load models with the client (or pass
    `load=[names]`). Use as a context manager, or call start() and stop()."""

    def __init__(self, repository: str | os.PathLike, backend_dir: str | os.PathLike, log: str | os.PathLike,
                 load: tuple[str, ...] = (), extra_args: tuple[str, ...] = ()):
        binary = server_binary()
        if binary is None:
            raise AotpackError(f"no tritonserver at {Path(os.environ.get('TRITON_HOME', DEFAULT_HOME)) / BINARY}: "
                               "install it with `make triton-server` (or set TRITON_HOME)")
        self.binary, self.repository, self.backend_dir, self.log_path = binary, Path(repository), Path(backend_dir), Path(log)
        self.http_port, self.grpc_port = _free_port(), _free_port()
        self.args = [str(binary), f"--model-repository={self.repository}", f"--backend-directory={self.backend_dir}",
                     "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", f"--http-port={self.http_port}",
                     f"--grpc-port={self.grpc_port}", "--allow-metrics=false", "--model-control-mode=explicit",
                     *(f"--load-model={m}" for m in load), *extra_args]
        self.process: subprocess.Popen | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, timeout_s: float = 120.0) -> TritonServer:
        log = open(self.log_path, "wb")  # noqa: SIM115 (the child keeps it open; closed in stop())
        self._log_file = log
        self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AotpackError(f"tritonserver exited with status {self.process.returncode}:\n{self.log()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.25)
        self.stop()
        raise AotpackError(f"tritonserver was not ready after {timeout_s:.0f} s:\n{self.log()[-4000:]}")

    def rss_bytes(self) -> int:
        """The server process's resident memory (VmRSS)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AotpackError(f"no VmRSS for process {self.process.pid}")

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM by process id (Triton unloads its models and exits), SIGKILL if it has not after timeout_s."""
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if getattr(self, "_log_file", None):
            self._log_file.close()

    def __enter__(self) -> TritonServer:  # noqa: PYI034 (Self needs Python 3.11 or typing_extensions)
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# KServe v2 datatype names of the numpy dtypes aotpack signatures use.
_V2_DATATYPES = {"float32": "FP32", "float64": "FP64", "float16": "FP16", "int64": "INT64", "int32": "INT32",
                 "int16": "INT16", "int8": "INT8", "uint8": "UINT8", "bool": "BOOL"}


class HttpClient:
    """A minimal client of Triton's HTTP/REST protocol (KServe v2 with the binary tensor extension) on one
    keep-alive connection, from the standard library only, so that the GPU test and benchmark run where
    tritonclient is not installed (a machine without network). One thread at a time: make one per thread."""

    def __init__(self, url: str, timeout_s: float = 60.0):
        import http.client

        host, port = url.split(":")
        self._connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)

    def _request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None):
        self._connection.request(method, path, body=body, headers=headers or {})
        response = self._connection.getresponse()
        return response, response.read()

    def _json(self, method: str, path: str) -> dict:
        import json

        response, data = self._request(method, path)
        if response.status != 200:
            raise AotpackError(f"{method} {path}: HTTP {response.status}: {data.decode(errors='replace')}")
        return json.loads(data) if data else {}

    def load(self, model: str) -> None:
        self._json("POST", f"/v2/repository/models/{model}/load")

    def unload(self, model: str) -> None:
        self._json("POST", f"/v2/repository/models/{model}/unload")

    def ready(self, model: str) -> bool:
        response, _ = self._request("GET", f"/v2/models/{model}/ready")
        return response.status == 200

    def config(self, model: str) -> dict:
        return self._json("GET", f"/v2/models/{model}/config")

    def statistics(self, model: str) -> dict:
        return self._json("GET", f"/v2/models/{model}/stats")["model_stats"][0]

    def infer(self, model: str, inputs: dict, outputs: tuple[str, ...]) -> dict:
        """Runs `model` on {name: numpy array}; returns {name: numpy array} for `outputs`. A refused request
        raises AotpackError with the server's message."""
        import json

        import numpy as np

        header = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": _V2_DATATYPES[a.dtype.name],
                              "parameters": {"binary_data_size": a.nbytes}} for n, a in inputs.items()],
                  "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in outputs]}
        head = json.dumps(header).encode()
        body = head + b"".join(np.ascontiguousarray(a).tobytes() for a in inputs.values())
        response, data = self._request("POST", f"/v2/models/{model}/infer", body, {
            "Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"})
        if response.status != 200:
            raise AotpackError(f"{model}: HTTP {response.status}: {data.decode(errors='replace')}")
        json_length = int(response.getheader("Inference-Header-Content-Length", len(data)))
        result = json.loads(data[:json_length])
        by_type = {v: k for k, v in _V2_DATATYPES.items()}
        arrays, offset = {}, json_length
        for out in result["outputs"]:
            size = out["parameters"]["binary_data_size"]
            arrays[out["name"]] = np.frombuffer(data[offset:offset + size], dtype=by_type[out["datatype"]]).reshape(out["shape"])
            offset += size
        return arrays

    def close(self) -> None:
        self._connection.close()
