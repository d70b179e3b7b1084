"""An IR pass on and off, on the CPU, in one process: the C++ backend's side of an A/B that scripts/pdl_bench.py
makes on the GPU.

    python scripts/cpu_variant_bench.py [--model llama] [--skip pair_products] [--seqs 1,16,128,512] [--threads 2]
    python scripts/cpu_variant_bench.py --model gpt2 --set lowering.ir.norm_folding.ENABLED=1   # a pass turned on

Exports examples/MODEL at its full size twice through the public pipeline (float32, target cpu, verification at
the example; seq 1..512): as the exporter makes it, and with the passes of --skip (names of what `lower` in
lowering/stages.py calls) left out, or with --set's module constant (an integer) set instead. Then times both packages in turns, 5 rounds of the best of a few calls each,
and prints the medians in ms and whether the outputs are identical bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

EXPORT_CODE = """
import os, sys
os.environ["AOTPACK_EXAMPLE_SIZE"] = "full"
import importlib
from aotpack.lowering import stages
for skipped in filter(None, sys.argv[3].split(",")):
    setattr(stages, skipped, lambda program: program)
for setting in filter(None, sys.argv[4].split(",")):
    name, value = setting.split("=")
    module, constant = name.rsplit(".", 1)
    setattr(importlib.import_module("aotpack." + module), constant, int(value))
from aotpack.api import export_model_file
export_model_file(sys.argv[1], sys.argv[2], dynamic=("seq=1..512",), verify="example")
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="llama")
    parser.add_argument("--skip", default="pair_products")
    parser.add_argument("--set", default="", help="MODULE.CONSTANT=INT for the second package instead of --skip")
    parser.add_argument("--seqs", default="1,16,128,512")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ["AOTPACK_EXAMPLE_SIZE"] = "full"
    import torch
    from aotpack import runtime

    sys.path.insert(0, str(REPO / "scripts"))
    from gpu_acceptance import example_module, make_inputs  # the benchmarks' inputs
    from gpu_bench import MODELS

    model_file = REPO / "examples" / args.model / "model.py"
    variants = {"default": ("", ""), (f"with {args.set}" if args.set else f"without {args.skip}"):
                ("", args.set) if args.set else (args.skip, "")}
    sessions = {}
    for i, (label, (skip, setting)) in enumerate(variants.items()):
        package = Path(tempfile.gettempdir()) / f"cpu_variant_{args.model}_{i}.aotpack"
        subprocess.run([sys.executable, "-c", EXPORT_CODE, str(model_file), str(package), skip, setting], check=True)
        sessions[label] = runtime.Model(package).session(num_threads=args.threads, device="cpu")
    module = example_module(model_file)
    for seq in (int(s) for s in args.seqs.split(",")):
        inputs = [x.numpy() for x in make_inputs(args.model, module, MODELS[args.model][1], seq)]
        outputs = {label: s.run(inputs) for label, s in sessions.items()}
        rounds: dict[str, list[float]] = {label: [] for label in sessions}
        for _ in range(5):
            for label, s in sessions.items():
                calls = []
                for _ in range(5 if seq <= 128 else 2):
                    start = time.perf_counter()
                    s.run(inputs)
                    calls.append((time.perf_counter() - start) * 1e3)
                rounds[label].append(min(calls))
        first, *others = outputs.values()
        equal = all(all((a == b).all() for a, b in zip(first, o)) for o in others)
        print(json.dumps({"model": args.model, "seq": seq, "torch": torch.__version__, "bit_equal": bool(equal),
                          "ms": {label: round(statistics.median(t), 2) for label, t in rounds.items()}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
