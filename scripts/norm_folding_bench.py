"""What folding the norms into their products saves (ir/norm_folding.py, with ir/shared_combination.py).

    python scripts/norm_folding_bench.py [--model gpt2|llama] [--device cpu|cuda] [--seqs 1,128,512] [--repeat 7]

Exports the full-size example (`--size small`: the tests' size; batch 1..2, seq 1..2048) twice through the public API, verification on (CPU:
float32; CUDA: bf16 for the local GPU, not tuned, so both packages get the tables' configurations): once as
aotpack lowers it and once with the two passes turned off. Then runs both in one process on the same random
token ids (CUDA: device tensors in and out, CUDA graphs, as serving runs it), alternating the packages each
repetition so host noise falls on both, and prints per seq the kernel count, the median milliseconds per run
of each (CUDA: and their kernels' time from CUPTI), their ratio and the largest difference between the outputs
relative to the largest logit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _as_float64(out, dtype, from_runtime) -> np.ndarray:
    """An output as float64 numbers: a device tensor (CUDA sessions with device I/O) or the runtime's array."""
    if hasattr(out, "to_torch"):
        return out.to_torch().float().cpu().numpy().astype(np.float64)
    return from_runtime(np.asarray(out), dtype).astype(np.float64)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt2", choices=("gpt2", "llama"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--seqs", default="1,128,512")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU sessions' threads")
    parser.add_argument("--size", default="full", choices=("full", "small"), help="the example's size")
    args = parser.parse_args()
    os.environ["AOTPACK_EXAMPLE_SIZE"] = args.size

    import torch
    from aotpack import runtime
    from aotpack.api import export_model_file
    from aotpack.lowering import stages
    from aotpack.packages.reader import read_package
    from aotpack.verification import to_numpy
    from aotpack.verification.compare import from_runtime

    model_file = REPO / "examples" / args.model / "model.py"
    options: dict = {}  # verification on, as users export
    if args.device == "cuda":
        major, minor = torch.cuda.get_device_capability(0)
        options.update(target="cuda", dtype="bf16", cuda_arch=str(10 * major + minor), tune=False)
    sessions, counts = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for label in ("folded", "unfolded"):
            if label == "unfolded":
                stages.fold_norms = stages.fuse_shared_combinations = lambda program: program
            path = Path(tmp) / f"{args.model}_{label}.aotpack"
            started = time.perf_counter()
            export_model_file(model_file, path, dynamic=["batch=1..2", "seq=1..2048"], **options)
            counts[label] = len(read_package(path).program.steps)
            print(f"{label}: exported in {time.perf_counter() - started:.1f} s, {counts[label]} steps", flush=True)
            sessions[label] = (runtime.Model(path).session(device="cuda", io="device") if args.device == "cuda"
                               else runtime.Model(path).session(num_threads=args.threads))
        dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
        vocab = {"gpt2": 50257, "llama": 32000}[args.model] if args.size == "full" else 1000
        for seq in (int(s) for s in args.seqs.split(",")):
            ids = torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(seq))
            inputs = [ids.cuda()] if args.device == "cuda" else [to_numpy(ids)]
            outs = {label: _as_float64(s.run(inputs)[0], dtype, from_runtime) for label, s in sessions.items()}
            times: dict[str, list[float]] = {label: [] for label in sessions}
            for _ in range(args.repeat):
                for label, session in sessions.items():
                    start = time.perf_counter()
                    session.run(inputs)
                    times[label].append(time.perf_counter() - start)
            folded, unfolded = (statistics.median(times[label]) * 1e3 for label in ("folded", "unfolded"))
            if args.device == "cuda":  # the kernels' own time, from CUPTI (as scripts/gpu_bench.py reports it)
                sys.path.insert(0, str(REPO / "scripts"))
                from gpu_bench import gpu_time_per_run

                kernels = {label: gpu_time_per_run(lambda s=s: s.run(inputs))["kernel_ms"] for label, s in sessions.items()}
                print(f"{args.model} seq {seq}: kernels folded {kernels['folded']:.3f} ms, unfolded "
                      f"{kernels['unfolded']:.3f} ms", flush=True)
            scale = max(np.abs(outs["unfolded"]).max(), 1.0)
            difference = np.abs(outs["folded"] - outs["unfolded"]).max() / scale
            print(f"{args.model} seq {seq} ({args.device}): folded {folded:.2f} ms ({counts['folded']} steps), "
                  f"unfolded {unfolded:.2f} ms ({counts['unfolded']}), unfolded / folded {unfolded / folded:.3f}, "
                  f"largest difference {difference:.2e} of the largest logit", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
