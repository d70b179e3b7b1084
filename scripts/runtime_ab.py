"""Two builds of the C++ runtime against each other on one package, on the GPU: what a runtime-side change (the
graph's nodes, the host's work per run) does to the wall time of a run, with everything else the same.

    python scripts/runtime_ab.py PACKAGE --model gpt2 --lib build/runtime_ab/libaotpack.so \\
        --lib build/runtime/libaotpack.so [--seqs 1,128,512] [--rounds 4] [--calls 400] [--out AB.json]

A process loads one runtime library for its life (runtime.py opens it once), so each library is timed in
processes of its own, the libraries alternating over --rounds rounds; each child times a device-I/O session with
CUDA graphs (the benchmark's headline: scripts/gpu_bench.py) at each seq of the model's example inputs
(scripts/gpu_acceptance.py), the median wall microseconds of --calls runs after 300 warm-up runs. The report
gives each library's median over the rounds and checks that their outputs were identical bit for bit.

The earlier build comes from a revision's sources, which must travel with the working tree (the GPU machine
gets no git history): before sending, `mkdir -p ab && git archive REV runtime_cpp | tar -x -C ab`; there,
`cmake -S ab/runtime_cpp -B build/runtime_ab -DCMAKE_BUILD_TYPE=Release && cmake --build build/runtime_ab
--target aotpack -j16`. The Python binding is this tree's for both (the libraries share the C API).
scripts/gpu_runtime_check.sh does all of that on the GPU machine, with the GPU tests, in one command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, json, statistics, sys, time
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[1])
from aotpack import runtime
from gpu_acceptance import MODELS, example_module, make_inputs

package, name, seqs, calls = sys.argv[2], sys.argv[3], [int(s) for s in sys.argv[4].split(",")], int(sys.argv[5])
module = example_module(Path(sys.argv[1]).parent / "examples" / name / "model.py")
session = runtime.Model(package).session(device="cuda", io="device")
result = {}
for seq in seqs:
    inputs = [x.cuda() for x in make_inputs(name, module, MODELS[name][0], seq)]
    torch.cuda.synchronize()
    for _ in range(300):
        session.run(inputs)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        session.run(inputs)
        times.append(time.perf_counter() - start)
    digest = hashlib.sha256(b"".join(o.to_torch().cpu().view(torch.uint8).numpy().tobytes()
                                     for o in session.run(inputs))).hexdigest()
    result[seq] = {"us": round(statistics.median(times) * 1e6, 2), "outputs_sha256": digest}
print("RESULT " + json.dumps(result))
"""


def run_child(lib: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, AOTPACK_RUNTIME_LIB=str(Path(lib).resolve()), AOTPACK_EXAMPLE_SIZE="full")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "scripts"), str(args.package), args.model,
                           args.seqs, str(args.calls)], env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    found = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not found:
        raise SystemExit(f"{lib}: the timing process failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(found[-1][len("RESULT "):])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", type=Path)
    parser.add_argument("--model", required=True, help="the example the package was exported from (its inputs)")
    parser.add_argument("--lib", action="append", required=True, help="a libaotpack.so; give two or more")
    parser.add_argument("--seqs", default="1,128,512")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--out", type=Path, default=None, help="write the rounds and medians here as JSON")
    args = parser.parse_args()
    if len(args.lib) < 2:
        parser.error("--lib: give at least two libraries to compare")
    rounds: dict[str, list[dict]] = {lib: [] for lib in args.lib}
    for r in range(args.rounds):
        for lib in args.lib:
            rounds[lib].append(run_child(lib, args))
            print(f"round {r + 1} {lib}: " + ", ".join(f"seq {s} {v['us']} us" for s, v in rounds[lib][-1].items()),
                  flush=True)
    seqs = list(rounds[args.lib[0]][0])
    medians = {lib: {s: round(statistics.median(run[s]["us"] for run in runs), 2) for s in seqs}
               for lib, runs in rounds.items()}
    digests = {s: {run[s]["outputs_sha256"] for runs in rounds.values() for run in runs} for s in seqs}
    identical = all(len(d) == 1 for d in digests.values())
    for lib, by_seq in medians.items():
        print(f"median {lib}: " + ", ".join(f"seq {s} {us} us" for s, us in by_seq.items()))
    print("outputs identical across libraries and rounds:", identical)
    if args.out:
        args.out.write_text(json.dumps({"package": str(args.package), "model": args.model, "rounds": rounds,
                                        "medians_us": medians, "outputs_identical": identical}, indent=1))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
