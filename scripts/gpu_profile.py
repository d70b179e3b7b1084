"""Where a CUDA package's time goes: GPU time per kernel family of one run, through torch.profiler (CUPTI
sees the runtime's launches, made in the same process through ctypes).

    python scripts/gpu_profile.py MODEL BATCH SEQ [DTYPE] [--no-tune] [--all] [--package P]   # MODEL: e.g. bert

Exports examples/MODEL at its full size for the local GPU (tuned unless --no-tune), runs it a few times, then
prints the GPU time of each kernel family (attention, matmul, pointwise, reduction, ...) and the slowest
kernels, timed without programmatic dependent launch (under it a kernel's wait for its predecessor counts as its
time); --all also prints every kernel of one run in launch order.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    from aotpack import progress, runtime
    from aotpack.api import export_spec
    from aotpack.exporter import load_model_file, parse_dynamic_specs
    from aotpack.packages.reader import read_package
    from aotpack.verification import to_numpy
    from gpu_acceptance import example_module, make_inputs  # this script's neighbour: the same inputs

    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("batch", type=int)
    parser.add_argument("seq", type=int)
    parser.add_argument("dtype", nargs="?", default="bf16")
    parser.add_argument("--no-tune", action="store_true")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--package", type=Path, help="export there, or profile the package already there (its "
                        "launches alone, as under a kernel profiler such as ncu)")
    args = parser.parse_args()
    name, batch, seq, dtype = args.model, args.batch, args.seq, args.dtype
    os.environ["AOTPACK_EXAMPLE_SIZE"] = "full"
    plan_ranges = parse_dynamic_specs((f"batch=1..{max(batch, 2)}", f"seq=1..{max(seq, 16)}"))
    major, minor = torch.cuda.get_device_capability(0)
    path = args.package or Path(tempfile.mkdtemp()) / f"{name}.aotpack"
    if args.package is None or not path.exists():
        with progress.reporting(progress.Progress(print)):  # the export's stages, and what tuning chose
            export_spec(load_model_file(REPO / "examples" / name / "model.py"), path, dtype=dtype,
                        cli_ranges=plan_ranges, target="cuda", cuda_arch=str(major * 10 + minor),
                        tune=False if args.no_tune else None)
    package = read_package(path)
    steps = package.program.sections["cuda"]["steps"]
    kernels = package.program.sections["cuda"]["kernels"]  # the exported kernels, tuned or from the tables
    family = {k["name"]: k["family"] for k in kernels}
    shapes = {k["name"]: " ".join(f"{key}={v}" for key, v in k["config"].items()) for k in kernels}
    # Without programmatic dependent launch: with it a kernel starts while its predecessor runs and CUPTI counts
    # the wait as its time, so a product after a short kernel showed twice its own time (gpu_bench does the same).
    session = runtime.Model(path).session(device="cuda", cuda_pdl=False)
    inputs = make_inputs(name, example_module(REPO / "examples" / name / "model.py"), batch, seq)
    host = [to_numpy(x) for x in inputs]
    for _ in range(3):
        session.run(host)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        session.run(host)
        torch.cuda.synchronize()
    per_family: dict[str, float] = defaultdict(float)
    per_kernel: dict[str, list[float]] = defaultdict(list)
    timeline: list[tuple[float, str, float]] = []
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = event.device_time if hasattr(event, "device_time") else event.cuda_time
        kind = family.get(event.name, "copy" if "memcpy" in event.name.lower() else event.name[:40])
        per_family[kind] += us
        per_kernel[f"{kind} {event.name}"].append(us)
        timeline.append((event.time_range.start, f"{kind} {event.name}", us))
    total = sum(per_family.values())
    print(f"{name} batch {batch} seq {seq} {dtype}: {total / 1e3:.2f} ms of GPU time in {len(steps)} steps "
          "")
    for kind, us in sorted(per_family.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<12} {us / 1e3:8.2f} ms  {100 * us / total:5.1f}%")
    print("  slowest kernels (total ms, calls):")
    for key, times in sorted(per_kernel.items(), key=lambda kv: -sum(kv[1]))[:8]:
        print(f"    {sum(times) / 1e3:8.2f} ms  x{len(times):<3} {key} {shapes.get(key.split()[-1], '')}")
    if args.all:
        print("  every kernel in launch order (us):")
        for _, key, us in sorted(timeline):
            print(f"    {us:8.1f}  {key} {shapes.get(key.split()[-1], '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
