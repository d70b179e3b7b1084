"""Throughput and latency through Triton Inference Server with the aotpack backend, next to aotpack's runtime
called directly (issue 15; docs/serving.md).

    python scripts/triton_bench.py OUT_DIR [--device cpu|cuda] [--concurrency 1,8,32] [--seconds 5]

For the MLP example (one request: 1 x 32) and a small transformer (tests/serving/models/batched_block.py,
examples/transformer_block with a dynamic batch: one request 1 x 32 x 64), at each concurrency C:

- server: C client threads, each with its own keep-alive HTTP connection (aotpack.triton_server.HttpClient,
  binary tensors), sending one request after another for --seconds; the model has 2 instances (CPU, or GPU 0
  with --device cuda) and dynamic batching (queue delay --queue-delay-us);
- direct: C threads, each with its own aotpack.runtime session on the same device, running the same request.

Reported per point: requests/s and p50/p99 latency in ms. Writes OUT_DIR/triton_bench.json and prints the
table of docs/serving.md. Needs `make triton-server` (or TRITON_HOME) and the backend (`make runtime`);
tritonclient is not needed, so it runs on a machine without network with the server bundle carried there
(docs/serving.md, "On a GPU machine").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "mlp": (REPO / "examples" / "mlp" / "model.py", ["--dynamic", "batch=1..64"], {"input": (1, 32)}),
    "transformer_block": (REPO / "tests" / "serving" / "models" / "batched_block.py", [], {"x": (1, 32, 64)}),
}


def _aotpack(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "aotpack.cli", *args], capture_output=True, text=True, cwd=REPO,
                            check=False)
    if result.returncode != 0:
        sys.exit(f"aotpack {' '.join(args)} failed:\n{result.stderr}")


def _percentiles(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3
    return {"p50_ms": round(pick(0.50), 3), "p99_ms": round(pick(0.99), 3)}


def _drive(threads: int, seconds: float, make_worker) -> dict:
    """Runs `threads` workers (make_worker(i) -> a callable doing one request) for `seconds`; the figures."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[str] = []
    start_at = time.perf_counter() + 0.2
    stop_at = start_at + seconds

    def loop(i: int) -> None:
        try:
            work = make_worker(i)
            work()  # warm-up: first-run costs (connections, graphs) are not what is measured
            while time.perf_counter() < start_at:
                time.sleep(0.001)
            while (t0 := time.perf_counter()) < stop_at:
                work()
                latencies[i].append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 (reported, and the point marked failed)
            errors.append(f"{type(e).__name__}: {e}")

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    flat = [x for lat in latencies for x in lat]
    if errors or not flat:
        return {"error": errors[0] if errors else "no request finished"}
    return {"requests": len(flat), "requests_per_s": round(len(flat) / seconds, 1), **_percentiles(flat)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--queue-delay-us", type=int, default=200)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    from aotpack import runtime
    from aotpack.serving import triton_backend_dir
    from aotpack.triton_server import HttpClient, TritonServer

    levels = [int(c) for c in args.concurrency.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    repo = args.out / "repository"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir()
    target = ["--target", "cpu,cuda"] if args.device == "cuda" else []
    names = args.models.split(",")
    for name in names:
        model_file, dynamic, _ = MODELS[name]
        package = args.out / f"{name}.aotpack"
        _aotpack("export", str(model_file), *dynamic, *target, "--name", name, "-o", str(package), "-q")
        staging = args.out / f"staging-{name}"
        shutil.rmtree(staging, ignore_errors=True)
        _aotpack("publish", str(package), "--format", "triton", "--out", str(staging), "--instance-kind",
                 "gpu" if args.device == "cuda" else "cpu", "--instances", "2", "--dynamic-batching",
                 "--max-queue-delay-us", str(args.queue_delay_us))
        shutil.move(str(staging / name), repo / name)
        staging.rmdir()

    rng = np.random.default_rng(0)
    results = {"device": args.device, "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg(),
               "seconds_per_point": args.seconds,
               "queue_delay_us": args.queue_delay_us, "points": []}
    with TritonServer(repo, triton_backend_dir(), args.out / "tritonserver.log", load=tuple(names)) as server:
        for name in names:
            _, _, shapes = MODELS[name]
            inputs = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
            model = runtime.Model(args.out / f"{name}.aotpack")
            for c in levels:
                def server_worker(_i: int, name=name, inputs=inputs):
                    client = HttpClient(server.http_url)
                    return lambda: client.infer(name, inputs, ("output",))

                def direct_worker(_i: int, model=model, inputs=inputs):
                    session = model.session(device=args.device)
                    ordered = list(inputs.values())
                    return lambda: session.run(ordered)

                for way, worker in (("server", server_worker), ("direct", direct_worker)):
                    point = {"model": name, "way": way, "concurrency": c, **_drive(c, args.seconds, worker)}
                    results["points"].append(point)
                    print(json.dumps(point), flush=True)
            stats = HttpClient(server.http_url).statistics(name)
            results.setdefault("server_statistics", {})[name] = {
                "inference_count": stats.get("inference_count"), "execution_count": stats.get("execution_count")}
    (args.out / "triton_bench.json").write_text(json.dumps(results, indent=1))
    print("\n| model | concurrency | server req/s | server p50 / p99 ms | direct req/s | direct p50 / p99 ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in names:
        for c in levels:
            row = {p["way"]: p for p in results["points"] if p["model"] == name and p["concurrency"] == c}
            cell = lambda p: (f"{p['requests_per_s']} | {p['p50_ms']} / {p['p99_ms']}" if "error" not in p
                              else f"failed: {p['error']} | ")
            print(f"| {name} | {c} | {cell(row['server'])} | {cell(row['direct'])} |")
    for name, s in results.get("server_statistics", {}).items():
        print(f"{name}: {s['inference_count']} inferences in {s['execution_count']} executions")


if __name__ == "__main__":
    main()
