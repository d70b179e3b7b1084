"""Programmatic dependent launch policies, and other export variants, against each other on the GPU, in one process.

    python scripts/pdl_bench.py OUT_DIR [--models gpt2,llama] [--seqs 1,16,128,512,2048] [--tune]
                                        [--runs none/off,none/wait,policy,always]   # the runs to time
                                        [--early-rows 256,512]   # more bounds for EARLY_LAUNCH_ROWS to try

Each model is exported once per policy, through the public pipeline with verification on
(aotpack.api.export_model_file, bf16, target cuda; untuned unless --tune, so that every policy has the same
configurations), the policies set through lowering/backends/cuda/render.py's constants:

- `none`: no kernel lets its successor launch early (EARLY_LAUNCH_ROWS = 0), no weight fetched early;
- `policy`: the exporter's defaults (EARLY_LAUNCH_ROWS, PREFETCH_ROWS);
- `always`: every kernel lets its successor launch early, no weight fetched early;
- `early<=R` for each R of --early-rows: the defaults with EARLY_LAUNCH_ROWS = R;
- `unpaired`: the defaults with ir/paired_products.py's pass skipped (a gated MLP's gate and up projections
  as two kernels, as before session 20);
- `buckets4x`: the defaults with buckets cut every factor of 4 above 2048 rows (ir/buckets.py, before session 20);
- `untransposed`: the defaults with [K, N] weights (GPT-2's Conv1D) kept [K, N] (backends/cuda/weight_layout.py's
  pass skipped: before session 21);
- `lateepilogue`: the defaults with every product's epilogue after its k loop (EARLY_EPILOGUE_ROWS = 0: before
  session 22);
- `unstacked`: the defaults with ir/stacked_pointwise.py's pass skipped (a rotary embedding's q and k rotations as
  two kernels, as before session 25);
- `unfoldedidx`: the defaults with ir/epilogue.py's `_folded_indices` skipped (a residual read in a product's
  epilogue through an int64 division and modulo by seq per row, as before session 26);
- `rowsx4`: the defaults with few-row row kernels as before session 26 (ROW_PER_PROGRAM_ROWS = 0: four rows and
  eight warps a program for a 768-wide norm, not one row and one warp);
- `prefetch128`: the defaults with PREFETCH_ROWS = 128: products of buckets up to 128 rows fetch their weight into
  L2 before their wait too (the first tile of rows' programs, where a bucket has more than one), not only those of
  up to 16 (session 28; untimed);
- `normfold`: the defaults with ir/norm_folding.py on (ENABLED: norms folded into the products that write and read
  their rows; off by default until this variant has been timed);
- `nonorms`: an upper bound, not a package anyone should run: every row kernel that only products read as their
  `a`, and that reads one arena buffer of its own size besides weights (a pre-norm model's layer or RMS norm
  after the first), is dropped and its readers read its input instead. Its results are wrong (exported with
  verification off, never compared); its time is what removing those kernels' launches and passes could gain.

Runs: `none/off`, the `none` package launched without the attribute (a session with cuda_pdl=False: as
packages ran before session 17); `none/wait`, the same launched with it (each kernel starts as its predecessor ends); `policy` and
`always`, launched with it (the runtime's default); `nographs`, the `policy` package in a session without CUDA
graphs. The others are timed with CUDA graphs; all with device tensors, interleaved
round by round so that drift reaches all alike: the median of each round's median wall ms, with the lowest round
(`min_ms`) and, per run, the rounds in which it was faster than the reference (`faster_rounds`: on a machine
whose rounds jump between levels a few percent apart, a median can mislead where the pairwise count does not).
The launch policies'
outputs must equal the reference's bit for bit (the first of --runs: `none/off` unless left out); a variant that
changes the kernels (`unpaired`, `buckets4x`) may round differently, so each run's largest difference to the
reference, relative to its largest output, is recorded too.
--timeline adds where each run's wall time goes at each point (timeline(): host time before and after the GPU's
work, the GPU span, kernel time, idle gaps and the largest of them). It profiles through torch.profiler, and CUPTI,
once on, slows every later launch of the process (session 35: a GPT-2 run 0.286 -> 0.327 ms on an H100), so the
walls of every point after the first timeline are high for every run alike: the runs' ratios hold, their times do
not (compare those with a run without --timeline). Results go to OUT_DIR/pdl_bench.json as they come.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from gpu_bench import MODELS, median_ms  # this script's neighbour: the same models and timing

# policy: the lowering/backends/cuda/render.py constants its export sets ({}: the exporter's defaults)
VARIANTS = {"none": {"EARLY_LAUNCH_ROWS": 0, "PREFETCH_ROWS": 0}, "policy": {},
            "always": {"EARLY_LAUNCH_ROWS": 10**9, "PREFETCH_ROWS": 0}, "unpaired": {"skip_passes": ["pair_products"]},
            "buckets4x": {"lowering.ir.buckets.LATER_FACTOR": 4},
            "untransposed": {"skip_passes": ["lowering.backends.cuda.backend.transpose_kn_weights"]},
            "lateepilogue": {"EARLY_EPILOGUE_ROWS": 0}, "unstacked": {"skip_passes": ["stack_pointwise"]},
            "nonorms": {"drop_norms": True}, "unfoldedidx": {"skip_passes": ["lowering.ir.epilogue._folded_indices"]},
            "rowsx4": {"ROW_PER_PROGRAM_ROWS": 0}, "normfold": {"lowering.ir.norm_folding.ENABLED": True},
            "prefetch128": {"PREFETCH_ROWS": 128}}
# (package, the session's options, label)
RUNS = (("none", {"cuda_pdl": False}, "none/off"), ("none", {}, "none/wait"), ("policy", {}, "policy"),
        ("always", {}, "always"), ("unpaired", {}, "unpaired"), ("buckets4x", {}, "buckets4x"),
        ("policy", {"cuda_graphs": False}, "nographs"), ("untransposed", {}, "untransposed"),
        ("lateepilogue", {}, "lateepilogue"), ("unstacked", {}, "unstacked"), ("nonorms", {}, "nonorms"), ("unfoldedidx", {}, "unfoldedidx"),
        ("rowsx4", {}, "rowsx4"), ("normfold", {}, "normfold"), ("prefetch128", {}, "prefetch128"))

EXPORT_CODE = """
import functools, importlib, json, os, sys, time
os.environ["AOTPACK_EXAMPLE_SIZE"] = "full"
from aotpack.lowering import stages
from aotpack.lowering.backends.cuda import render
from aotpack.api import export_model_file
model_file, package, arch, constants, tune, dynamic = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
verify = "range"
for name, value in json.loads(constants).items():
    if name == "drop_norms":  # the `nonorms` upper bound (see the docstring): wrong results, not verified
        sys.path.insert(0, os.path.join(os.path.dirname(importlib.import_module("aotpack").__file__), "scripts"))
        from pdl_bench import drop_norms
        stages.stack_pointwise = functools.partial(drop_norms, stages.stack_pointwise)
        verify = "off"
    elif name == "skip_passes":  # IR passes left out: those `lower` (lowering/stages.py) calls, or another module's
        for skipped in value:
            module, attr = skipped.rsplit(".", 1) if "." in skipped else (None, skipped)
            setattr(importlib.import_module("aotpack." + module) if module else stages, attr, lambda program: program)
    elif "." in name:  # another module's constant: "lowering.ir.buckets.LATER_FACTOR"
        module, constant = name.rsplit(".", 1)
        setattr(importlib.import_module("aotpack." + module), constant, value)
    else:
        setattr(render, name, value)
start = time.perf_counter()
export_model_file(model_file, package, dynamic=dynamic, dtype="bf16", target="cuda", cuda_arch=arch,
                  tune=None if tune == "1" else False, verify=verify)
print("EXPORT_S", round(time.perf_counter() - start, 1))
"""


def drop_norms(lower_last, program):
    """`nonorms`: `lower_last` (the last pass of `lower`), then the row kernels that only products read as their
    `a` and that read one arena buffer of their own size and dtype dropped, their readers reading that buffer."""
    from dataclasses import replace

    import sympy
    from aotpack.lowering.ir.kernels import MatmulKernel, RowKernel, StridedView

    program = lower_last(program)
    steps = list(program.steps)

    def size(name):
        return sympy.expand(sympy.Mul(*program.buffers[name].shape))

    for step in [s for s in steps if isinstance(s, RowKernel)]:
        readers = [s for s in steps if step.output in s.reads()]
        arena = [b for b in step.reads() if program.buffers[b].kind == "arena"]
        if (len(arena) != 1 or size(arena[0]) != size(step.output) or not readers
                or program.buffers[arena[0]].dtype != program.buffers[step.output].dtype
                or step.output in program.outputs
                or any(not isinstance(r, MatmulKernel) or not isinstance(r.a, StridedView) or r.a.buffer != step.output
                       or step.output in (*r.epilogue_reads(), *(() if isinstance(r.b, StridedView) and r.b.buffer
                                                                 != step.output else (step.output,)))
                       for r in readers)):
            continue
        for r in readers:
            steps[steps.index(r)] = replace(r, a=replace(r.a, buffer=arena[0]))
        steps.remove(step)
    print("DROPPED_NORMS", len(program.steps) - len(steps))
    return replace(program, steps=tuple(steps))


def export_variants(names: list[str], variants: list[str], arch: int, tune: bool) -> dict[tuple[str, str], Path]:
    jobs = [(name, variant) for name in names for variant in variants]
    env = dict(os.environ, AOTPACK_COMPILE_JOBS=str(max(1, (os.cpu_count() or 2) // len(jobs))))
    running = {}
    for name, variant in jobs:
        package = Path(tempfile.gettempdir()) / f"pdl_bench_{name}_{variant.replace('<=', '_')}.aotpack"  # not OUT_DIR: 250+ MB each
        log = open(package.with_suffix(".log"), "w")  # noqa: SIM115 - closed below
        cmd = [sys.executable, "-c", EXPORT_CODE, str(REPO / "examples" / name / "model.py"), str(package), str(arch),
               json.dumps(VARIANTS[variant]), str(int(tune)), *MODELS[name][2]]
        running[(name, variant)] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log, package)
    done = {}
    for key, (proc, log, package) in running.items():
        rc = proc.wait(timeout=900)
        log.close()
        text = package.with_suffix(".log").read_text()
        print(json.dumps({"export": key, "rc": rc, "tail": text.strip().splitlines()[-1 if rc == 0 else -15:]}),
              flush=True)
        if rc == 0:
            done[key] = package
    return done


def timeline(fn, calls: int = 7) -> dict:
    """Where one call's wall time goes, from torch.profiler's CPU ranges and CUPTI's GPU activity on the same
    clock (medians over `calls` calls, microseconds): host time before the first GPU activity, the GPU span
    (first start to last end), the kernels' summed time, the idle gaps between consecutive activities inside
    the span, host time after the last one; and the largest gaps of the median call with their neighbours."""
    import torch

    fn()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(calls):
            with torch.profiler.record_function(f"timeline_call_{i}"):
                fn()
    events = prof.events()
    calls_cpu = sorted((e.time_range.start, e.time_range.end) for e in events
                       if e.name.startswith("timeline_call_") and e.device_type == torch.autograd.DeviceType.CPU)
    gpu = sorted((e.time_range.start, e.time_range.end, e.name) for e in events
                 if e.device_type == torch.autograd.DeviceType.CUDA)
    rows = []
    for start, end in calls_cpu:
        mine = [g for g in gpu if start <= g[0] <= end]
        if not mine:
            continue
        kernels = [g for g in mine if "memcpy" not in g[2].lower() and "memset" not in g[2].lower()]
        gaps = [(b[0] - a[1], a[2][:60], b[2][:60]) for a, b in itertools.pairwise(mine)]
        rows.append({"wall_us": end - start, "host_before_us": mine[0][0] - start,
                     "gpu_span_us": mine[-1][1] - mine[0][0], "kernel_us": sum(g[1] - g[0] for g in kernels),
                     "gap_us": sum(max(0.0, gap) for gap, _, _ in gaps), "overlap_us": -sum(min(0.0, gap) for gap, _, _ in gaps),
                     "host_after_us": end - mine[-1][1], "activities": len(mine),
                     "largest_gaps": sorted(gaps, reverse=True)[:6]})
    if not rows:
        return {}
    keys = ("wall_us", "host_before_us", "gpu_span_us", "kernel_us", "gap_us", "overlap_us", "host_after_us")
    summary = {key: round(statistics.median(r[key] for r in rows), 1) for key in keys}
    median_call = sorted(rows, key=lambda r: r["wall_us"])[len(rows) // 2]
    summary["activities"] = median_call["activities"]
    summary["largest_gaps"] = [(round(g, 1), a, b) for g, a, b in median_call["largest_gaps"]]
    return summary


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--seqs", default="1,16,128,512,2048")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--runs", default="none/off,none/wait,policy,always",
                        help="comma-separated labels of RUNS; the first is the others' reference")
    parser.add_argument("--early-rows", default="", help="comma-separated EARLY_LAUNCH_ROWS bounds to try too")
    parser.add_argument("--timeline", action="store_true", help="where each run's wall time goes (timeline())")
    args = parser.parse_args()

    labels = args.runs.split(",")
    runs = sorted((run for run in RUNS if run[2] in labels), key=lambda run: labels.index(run[2]))
    reference_label = runs[0][2]
    for rows in filter(None, args.early_rows.split(",")):
        VARIANTS[f"early<={rows}"] = {"EARLY_LAUNCH_ROWS": int(rows)}
        runs.append((f"early<={rows}", {}, f"early<={rows}"))
    import torch
    from aotpack import runtime
    from gpu_acceptance import example_module, make_inputs

    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    major, minor = torch.cuda.get_device_capability(0)
    names = args.models.split(",")
    packages = export_variants(names, list(dict.fromkeys(run[0] for run in runs)), major * 10 + minor, args.tune)
    results: dict = {"device": torch.cuda.get_device_name(0), "tuned": args.tune, "points": []}
    os.environ["AOTPACK_EXAMPLE_SIZE"] = "full"
    for name in names:
        if (name, runs[0][0]) not in packages:
            continue
        sessions = {}
        for variant, options, label in runs:
            if (name, variant) not in packages:
                continue
            sessions[label] = runtime.Model(packages[(name, variant)]).session(device="cuda", io="device", **options)
        module = example_module(REPO / "examples" / name / "model.py")
        for seq in (int(s) for s in args.seqs.split(",")):
            dev = [x.cuda() for x in make_inputs(name, module, MODELS[name][1], seq)]
            reference = [o.to_torch().clone() for o in sessions[reference_label].run(dev)]
            outputs = {key: [o.to_torch().clone() for o in s.run(dev)] for key, s in sessions.items()}
            equal = {key: all(torch.equal(a, b) for a, b in zip(got, reference)) for key, got in outputs.items()}
            differ = {key: max(float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))
                               for a, b in zip(got, reference)) for key, got in outputs.items()}
            rounds: dict[str, list[float]] = {key: [] for key in sessions}
            for _ in range(args.rounds):
                for key, s in sessions.items():
                    rounds[key].append(median_ms(lambda s=s, dev=dev: s.run(dev), 30 if seq <= 512 else 15, sync=False))
            point = {"model": name, "seq": seq, "reference": reference_label, "equal_to_reference": equal,
                     "rel_diff_to_reference": differ,
                     "ms": {key: round(statistics.median(v), 4) for key, v in rounds.items()},
                     "min_ms": {key: round(min(v), 4) for key, v in rounds.items()},
                     # rounds are timed in turns, so a run and the reference share each round's state of the
                     # machine: in how many rounds each run was the faster of the two
                     "faster_rounds": {key: sum(a < b for a, b in zip(v, rounds[reference_label]))
                                       for key, v in rounds.items() if key != reference_label},
                     "rounds": rounds}
            if args.timeline:
                point["timeline"] = {key: timeline(lambda s=s, dev=dev: s.run(dev)) for key, s in sessions.items()}
            results["points"].append(point)
            shown = ("model", "seq", "ms", "min_ms", "faster_rounds", "equal_to_reference", "rel_diff_to_reference",
                     "timeline")
            print(json.dumps({k: point[k] for k in shown if k in point}), flush=True)
            (out / "pdl_bench.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
