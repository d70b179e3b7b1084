"""Cold start of GPT-2 on the GPU (issue 11, requirement 3): open to first result, in process and as a fresh process.

    python scripts/gpu_cold_start.py OUT_DIR [--repeat 5] [--package PATH] [--variants staged,pageable,builtin_sha]

Exports GPT-2 124M in bfloat16 for this GPU (as scripts/gpu_bench.py does: the public pipeline, verification on),
unless --package names one already made, then for each variant of the runtime's cold-start paths measures,
--repeat times each:

- in process (a Python process that has its CUDA context already, as a serving process would): a new
  runtime.Model opened to its first result with device I/O and the device prepared during the load
  (Model(prepare="cuda"), overlapped with the digests), the same without preparing, and with host I/O;
- as a fresh `aotpack-run PACKAGE --device cuda --timings` process (which prepares), wall time of the process;

and prints each part's time as the runtime reports it (AOTPACK_TIMINGS: digests, cuda context, modules, weights
upload, session memory, host staging, capture), the median per part over the repeats. Variants (environment of
the measured processes; each is read once per process, hence a child process per variant):

- staged: the defaults (weights through page-locked staging buffers, sha256 by OpenSSL where the host has it);
- pageable: AOTPACK_CUDA_WEIGHT_UPLOAD=pageable, the weights uploaded as before (synchronous pageable copies);
- builtin_sha: AOTPACK_LIBCRYPTO pointing nowhere, so the digests use the built-in SHA-256 (SHA-NI).

Writes OUT_DIR/cold_start.json (every repeat, every part) and prints a summary table. The targets: <= 200 ms in
process, <= 400 ms fresh, digests on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
MODEL = "gpt2"
TARGET_IN_PROCESS_MS, TARGET_FRESH_MS = 200, 400  # issue 11, requirement 3
VARIANTS = {
    "staged": {},
    "pageable": {"AOTPACK_CUDA_WEIGHT_UPLOAD": "pageable"},
    "builtin_sha": {"AOTPACK_LIBCRYPTO": "/nonexistent/libcrypto-not-here.so"},
}

CHILD_CODE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
os.environ["AOTPACK_EXAMPLE_SIZE"] = "full"
from pathlib import Path
import torch
from aotpack import runtime
from aotpack.verification import to_numpy
from gpu_acceptance import example_module, make_inputs
from gpu_bench import cold_start_in_process

package, batch, repeat = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.cuda.init()
torch.zeros(1, device="cuda")  # the process has its context, as a serving process would
module = example_module(Path(sys.argv[1]).parent / "examples" / "gpt2" / "model.py")
first = make_inputs("gpt2", module, batch, 1)
dev, host = [x.cuda() for x in first], [to_numpy(x) for x in first]
rows = {"device_io_prepared": [], "device_io_unprepared": [], "host_io_prepared": []}
for _ in range(repeat):
    rows["device_io_prepared"].append(cold_start_in_process(runtime, package, host, dev, "device", True))
    rows["device_io_unprepared"].append(cold_start_in_process(runtime, package, host, dev, "device", False))
    rows["host_io_prepared"].append(cold_start_in_process(runtime, package, host, dev, "host", True))
print("COLD_START " + json.dumps(rows))
"""


def median_parts(runs: list[dict]) -> dict[str, float]:
    """The median ms of each timing part over the runs (a part reported twice in a run counts as their sum)."""
    per_part: dict[str, list[float]] = {}
    for run in runs:
        sums: dict[str, float] = {}
        for part in run.get("parts", []):
            sums[part["part"]] = sums.get(part["part"], 0.0) + part["ms"]
        for name, ms in sums.items():
            per_part.setdefault(name, []).append(ms)
    return {name: round(statistics.median(v), 1) for name, v in per_part.items()}


def in_process(package: Path, batch: int, repeat: int, env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD_CODE, str(REPO / "scripts"), str(package), str(batch),
                           str(repeat)], capture_output=True, text=True, env=env, timeout=600, check=False)
    found = [line for line in done.stdout.splitlines() if line.startswith("COLD_START ")]
    if done.returncode != 0 or not found:
        return {"error": f"rc {done.returncode}: {done.stderr[-1500:]}"}
    return json.loads(found[-1][len("COLD_START "):])


def fresh_process(package: Path, batch: int, repeat: int, env: dict) -> list[dict]:
    from gpu_bench import parse_timings

    tool = REPO / "build" / "runtime" / "aotpack-run"
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([str(tool), str(package), "--device", "cuda", "--timings", "--repeat", "0",
                               f"--sym=batch={batch}", "--sym=seq=1"], capture_output=True, text=True, env=env,
                              timeout=120, check=False)
        wall = (time.perf_counter() - start) * 1e3
        if done.returncode != 0:
            return [{"error": done.stderr[-1500:]}]
        runs.append({"process_wall_ms": round(wall, 1), "parts": parse_timings(done.stderr)})
    return runs


def summarize(results: dict) -> str:
    lines = []
    for variant, r in results["variants"].items():
        lines.append(f"== {variant} {r['env'] or '(defaults)'}")
        if "error" in r["in_process"]:
            lines.append(f"in process: {r['in_process']['error']}")
        else:
            for kind, runs in r["in_process"].items():
                if not runs:
                    continue
                totals = [x["open_to_first_result_ms"] for x in runs]
                median = statistics.median(totals)
                verdict = "meets" if median <= TARGET_IN_PROCESS_MS else "misses"
                lines.append(f"in process, {kind}: open to first result, median {median:.1f} ms, {verdict} the "
                             f"{TARGET_IN_PROCESS_MS} ms target (each: {totals})")
                lines += [f"    {ms:8.1f} ms  {part}" for part, ms in median_parts(runs).items()]
        fresh = r["fresh_process"]
        if fresh and "error" in fresh[0]:
            lines.append(f"fresh process: {fresh[0]['error']}")
        elif fresh:
            walls = [x["process_wall_ms"] for x in fresh]
            median = statistics.median(walls)
            verdict = "meets" if median <= TARGET_FRESH_MS else "misses"
            lines.append(f"fresh aotpack-run process: wall, median {median:.1f} ms, {verdict} the {TARGET_FRESH_MS} ms "
                         f"target (each: {walls})")
            lines += [f"    {ms:8.1f} ms  {part}" for part, ms in median_parts(fresh).items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--package", type=Path, help="a GPT-2 bf16 CUDA package made before (skips the export)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    out_dir = args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    from gpu_bench import MODELS, export_all

    _, batch, _ = MODELS[MODEL]
    results: dict = {"model": MODEL, "repeat": args.repeat, "variants": {}}
    if args.package:
        package = args.package
    else:
        import torch

        major, minor = torch.cuda.get_device_capability(0)
        exported = export_all([MODEL], out_dir, major * 10 + minor)[MODEL]
        results["export"] = {k: v for k, v in exported.items() if k != "verification"}
        if "error" in exported:
            (out_dir / "cold_start.json").write_text(json.dumps(results, indent=1))
            print(exported["error"], file=sys.stderr)
            return 1
        package = Path(exported["package"])
    results["package"] = str(package)
    results["package_mb"] = round(package.stat().st_size / 1e6, 1)
    build = REPO / "build" / "runtime" / "libaotpack.so"
    for variant in [v for v in args.variants.split(",") if v]:
        env = {k: v for k, v in os.environ.items() if k not in ("AOTPACK_CUDA_WEIGHT_UPLOAD", "AOTPACK_LIBCRYPTO")}
        env.update(AOTPACK_TIMINGS="1", **VARIANTS[variant])
        if build.exists():
            env.setdefault("AOTPACK_RUNTIME_LIB", str(build))
        results["variants"][variant] = {
            "env": VARIANTS[variant],
            "in_process": in_process(package, batch, args.repeat, env),
            "fresh_process": fresh_process(package, batch, args.repeat, env),
        }
        (out_dir / "cold_start.json").write_text(json.dumps(results, indent=1, default=str))
    summary = summarize(results)
    (out_dir / "cold_start.txt").write_text(summary + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
