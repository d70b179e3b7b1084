"""Where a device-I/O run's wall time goes besides its kernels: Python's `session.run` against the C API under it
and the C++ runtime alone, on one package, in one process (the C++ tool in a process of its own).

    python3 scripts/gpu_run_overhead.py OUT_DIR [--model gpt2] [--seqs 1,128] [--package PKG] [--rounds 7]

Issue 12 asks GPT-2 at one token for 0.3 ms through the benchmark's Python call; the C++ runtime's replay met it
in sessions 30 and 34 (0.267-0.272 ms) and gpu_bench's Python `run()` did not (0.325), a gap much larger than the
binding's own work timed against the fake driver (8.5-9.5 us). This script found why (session 35; --stages): the
benchmark timed it in a process where torch.profiler had run (docs/performance.md, "Wall times after a
profiler"). Each row below takes away one layer of what `Session.run` does, timed in turns (ROUNDS rounds of
CALLS calls, medians of the rounds' medians), so the layer that costs is the difference of two rows:

- `session.run`: the public call (inputs filled into kept ctypes structs, torch's raw current stream, the C call
  `aotpack_session_run_after`, the outputs' DeviceTensors);
- `c run_after`: the same C call on structs filled once, no Python work around it;
- `c run`: `aotpack_session_run`, which does not make the session's stream wait for torch's;
- `enqueue+sync on torch's stream`: the run queued on torch's current stream, then waited for;
- `python fill` / `python outputs`: the binding's two halves alone, no C run;
- `torch launch+sync`: one tiny eager kernel and a synchronize, the host's round trip with torch;
- `session.run, nvidia-smi sampling`: the public call while scripts/gpu_clock.py's sampler runs, as it does
  around gpu_bench's aotpack rounds;
- `session.run, another session between`: the public call, each of its calls after one of a second session of
  the same model without programmatic dependent launch (gpu_bench times two such sessions in turns);
- the C++ tool's replay and queued runs (`aotpack-run --io device`), as scripts/gpu_bench.py reads them.

The package is exported through the CLI's pipeline with default settings (verification on; tuning on where the
GPU is local) unless --package names an existing one (a missing one is exported there). Results go to
OUT_DIR/run_overhead.json as they come.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
CALLS = 200


def median_us(fn, calls: int = CALLS) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--seqs", default="1,128")
    parser.add_argument("--package", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--stages", action="store_true",
                        help="then time the public call at seq 1 again after each thing gpu_bench's process did")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)

    import torch
    from aotpack import runtime
    from aotpack.api import export_model_file
    from gpu_acceptance import example_module, make_inputs
    from gpu_bench import MODELS, cpp_replay_and_queued_ms, host_launch_us

    result: dict = {"model": args.model, "device": torch.cuda.get_device_name(0), "points": []}

    def save() -> None:
        (args.out_dir / "run_overhead.json").write_text(json.dumps(result, indent=1))

    model_file = REPO / "examples" / args.model / "model.py"
    _, batch, dynamic = MODELS[args.model]
    os.environ["AOTPACK_EXAMPLE_SIZE"] = "full"  # the example's full-size configuration, in export and inputs
    package = args.package or Path(tempfile.mkdtemp()) / f"{args.model}.aotpack"
    if not package.exists():
        start = time.perf_counter()
        export_model_file(model_file, package, dynamic=list(dynamic), dtype="bf16", target="cuda")
        result["export_s"] = round(time.perf_counter() - start, 1)
    module = example_module(model_file)
    result["host_launch_us_before"] = round(host_launch_us(), 2)
    save()

    model = runtime.Model(package)
    session = model.session(device="cuda", io="device")
    other = model.session(device="cuda", io="device", cuda_pdl=False)

    for seq in map(int, args.seqs.split(",")):
        inputs = make_inputs(args.model, module, batch, seq)
        point = {"seq": seq, **time_layers(session, other, [x.cuda() for x in inputs], args.rounds)}
        replay, queued_ms = cpp_replay_and_queued_ms(package, [i.name for i in model.inputs], inputs, 400)
        point["cpp_replay_us"] = round(replay * 1e3, 2) if isinstance(replay, float) else replay
        point["cpp_queued_us"] = round(queued_ms * 1e3, 2) if isinstance(queued_ms, float) else queued_ms
        result["points"].append(point)
        print(json.dumps({k: v for k, v in point.items() if k != "rounds_us"}), flush=True)
        save()
    if args.stages:
        inputs = make_inputs(args.model, module, batch, 1)
        result["stages"] = []  # filled stage by stage, saved as each ends
        after_stages(session, [x.cuda() for x in inputs], model_file, args.rounds, result["stages"], save)
    result["host_launch_us_after"] = round(host_launch_us(), 2)
    result["context_flags"] = context_flags()
    save()
    return 0


def call_rows(session, dev: list) -> dict:
    """The calls of the module docstring's rows timed one call at a time, by row name, on a session that has run
    at `dev`'s shape (the C calls reuse the structs that run filled)."""
    import torch
    from aotpack import runtime

    lib, handle = session._lib, session._handle
    filled = session._device_args
    n = len(dev)
    torch_stream = session._torch_stream()
    tiny = torch.zeros(1, device="cuda")

    def c_run_after():
        runtime._check(lib.aotpack_session_run_after(handle, filled.tensors, n, torch_stream))

    def c_run():
        runtime._check(lib.aotpack_session_run(handle, filled.tensors, n))

    def queued():
        session.enqueue(dev)
        session.synchronize()

    def fill():
        for i, value in enumerate(session._ordered(dev)):
            session._fill_device_tensor(i, value, filled.tensors[i], filled.shapes[i])
        session._torch_stream()

    def torch_round_trip():
        tiny.add_(1.0)
        torch.cuda.synchronize()

    return {"session.run": lambda: session.run(dev), "c run_after": c_run_after, "c run": c_run,
            "enqueue+sync on torch's stream": queued, "python fill": fill,
            "python outputs": session._device_outputs, "torch launch+sync": torch_round_trip}


def time_layers(session, other, dev: list, rounds: int) -> dict:
    """The rows of the module's docstring at one shape, timed in turns: medians in us, and each round's. `other`:
    a second session of the model."""
    import gpu_clock
    import torch

    torch.cuda.synchronize()
    session.run(dev)  # the shape's graph recorded
    rows = call_rows(session, dev)

    def sampled():
        with gpu_clock.GpuClock(gpu_clock.nvidia_smi_id(0)):
            time.sleep(0.3)  # nvidia-smi started and sampling
            return median_us(lambda: session.run(dev))

    def interleaved():
        times = []
        for _ in range(CALLS):
            other.run(dev)
            start = time.perf_counter()
            session.run(dev)
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e6

    other.run(dev)
    timed_whole = {"session.run, nvidia-smi sampling": sampled, "session.run, another session between": interleaved}
    for fn in rows.values():  # warm-up
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in [*rows, *timed_whole]}
    for _ in range(rounds):
        for name, fn in rows.items():
            times[name].append(round(median_us(fn), 2))
        for name, fn in timed_whole.items():
            times[name].append(round(fn(), 2))
    return {"us": {name: round(statistics.median(v), 2) for name, v in times.items()}, "rounds_us": times}


def after_stages(session, dev: list, model_file: Path, rounds: int, results: list[dict], save) -> None:
    """session.run, the C call under it and torch's round trip timed again after each thing scripts/gpu_bench.py's
    process had done by the time it timed a model until session 35 (its Python runs were 0.325 ms at GPT-2's one
    token where this script's were 0.278 on the same H100): CUPTI's activity tracing through torch.profiler
    (gpu_bench's kernel times, which since run in a process of their own), the eager model's runs, a
    torch.compile(mode="reduce-overhead") model's runs."""
    import copy

    import torch
    from aotpack.exporter import load_model_file
    from gpu_bench import gpu_time_per_run

    rows = {name: fn for name, fn in call_rows(session, dev).items()
            if name in ("session.run", "c run_after", "torch launch+sync")}
    eager = copy.deepcopy(load_model_file(model_file).model).to(torch.bfloat16).eval().cuda()

    def run_eager():
        with torch.no_grad():
            for _ in range(20):
                eager(*dev)
        torch.cuda.synchronize()

    def run_compiled():
        compiled = torch.compile(eager, dynamic=True, mode="reduce-overhead")
        with torch.no_grad():
            for _ in range(20):
                compiled(*dev)
        torch.cuda.synchronize()

    stages = {"before": lambda: None, "after a torch.profiler run": lambda: gpu_time_per_run(rows["session.run"]),
              "after eager runs": run_eager, "after torch.compile reduce-overhead runs": run_compiled}
    for stage, do in stages.items():
        do()
        session.run(dev)
        torch.cuda.synchronize()
        times = {name: [round(median_us(fn), 2) for _ in range(rounds)] for name, fn in rows.items()}
        results.append({"stage": stage, "us": {name: round(statistics.median(v), 2) for name, v in times.items()}})
        print(json.dumps(results[-1]), flush=True)
        save()


def context_flags() -> int | str:
    """The current context's flags (CU_CTX_SCHED_*: how a synchronize waits), torch's and the runtime's."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        flags = ctypes.c_uint()
        rc = cuda.cuCtxGetFlags(ctypes.byref(flags))
        return flags.value if rc == 0 else f"cuCtxGetFlags returned {rc}"
    except OSError as e:
        return f"libcuda not loaded: {e}"


if __name__ == "__main__":
    sys.exit(main())
