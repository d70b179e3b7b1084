"""Short GPU benchmark and cross-compilation check, run by scripts/gpu_check.sh on a GPU machine
(`scripts/gpu_bench.py --quick OUT_DIR`; the full latency benchmark is scripts/gpu_bench.py).

1. Each example exported for CUDA here, run by the C++ runtime on the GPU (host inputs in, host outputs
   out), against eager PyTorch and torch.compile on the same GPU: median latency of repeated runs.
2. Packages cross-compiled elsewhere (no GPU, possibly another Triton) under gpu_artifacts/: run on CUDA and
   on CPU through the runtime with the same inputs; their outputs must agree.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


def _median_ms(fn, repeat: int = 30, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def bench_examples(out_dir: Path, arch: int) -> list[dict]:
    rows = []
    dynamic = {"cnn": ("height=32..32", "width=32..32")}  # torch 2.11 specialises the pooled sizes to even ones
    for example in ("mlp", "cnn", "transformer_block"):
        try:
            rows.append(_bench_one(example, dynamic.get(example, ()), out_dir, arch))
        except Exception as e:  # report and go on with the next example
            rows.append({"example": example, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _bench_one(example: str, dynamic: tuple[str, ...], out_dir: Path, arch: int) -> dict:
    from aotpack import runtime
    from aotpack.api import export_spec
    from aotpack.exporter import load_model_file, parse_dynamic_specs
    from aotpack.verification import relative_error, to_numpy

    spec = load_model_file(REPO / "examples" / example / "model.py")
    start = time.perf_counter()
    result = export_spec(spec, out_dir / f"{example}_cuda.aotpack", cli_ranges=parse_dynamic_specs(dynamic),
                         target="cuda", cuda_arch=str(arch))
    export_s = time.perf_counter() - start
    session = runtime.Model(result.path).session(device="cuda")
    inputs = [x.clone() for x in spec.example_inputs]
    host = [to_numpy(x) for x in inputs]
    model = spec.model.eval().cuda()
    dev_inputs = [x.cuda() for x in inputs]

    def eager():
        with torch.no_grad():
            y = model(*dev_inputs)
        torch.cuda.synchronize()
        return y

    def eager_host():  # the same work as aotpack's host-in/host-out run: copies included
        with torch.no_grad():
            y = model(*[x.cuda() for x in inputs])
        return y.cpu()

    compiled_model = torch.compile(model)

    def compiled():
        with torch.no_grad():
            y = compiled_model(*dev_inputs)
        torch.cuda.synchronize()
        return y

    ours = session.run(host)
    ref = eager().float().cpu().numpy()
    err = relative_error(ours[0].astype(np.float32), ref)
    row = {"example": example, "shapes": [list(x.shape) for x in inputs], "export_s": round(export_s, 1),
           "rel_err_vs_eager_gpu": float(f"{err:.1e}"),
           "aotpack_ms": round(_median_ms(lambda: session.run(host)), 3),
           "eager_ms": round(_median_ms(eager), 3), "eager_host_io_ms": round(_median_ms(eager_host), 3)}
    try:
        compiled()
        row["torch_compile_ms"] = round(_median_ms(compiled), 3)
    except Exception as e:  # torch.compile needs a working Inductor toolchain on this image
        row["torch_compile_ms"] = f"failed: {type(e).__name__}"
    return row


def check_cross_compiled(directory: Path) -> list[dict]:
    from aotpack import runtime

    rows = []
    for path in sorted(directory.glob("*.aotpack")):
        model = runtime.Model(path)
        rng = np.random.default_rng(0)
        inputs = []
        for info in model.inputs:
            shape = [d.size if d.size is not None else d.max for d in info.dims]
            inputs.append(rng.standard_normal(shape).astype(np.float32))
        row = {"package": path.name, "targets": [t["kind"] + (str(t.get("archs", ""))) for t in model.manifest["targets"]],
               "triton": model.manifest["producer"].get("triton")}
        try:
            cuda_out = model.session(device="cuda").run(inputs)
            cpu_out = model.session().run(inputs)
            from aotpack.verification import relative_error

            row["rel_err_cuda_vs_cpu"] = max(float(f"{relative_error(a, b):.1e}") for a, b in zip(cuda_out, cpu_out))
            row["ok"] = row["rel_err_cuda_vs_cpu"] <= 1e-5
        except runtime.AotpackError as e:
            row["ok"], row["error"] = False, str(e)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(out_dir: Path | None = None) -> int:
    out_dir = out_dir or Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    major, minor = torch.cuda.get_device_capability(0)
    summary = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    try:
        import triton

        summary["triton"] = triton.__version__
    except ImportError:
        pass
    summary["cross_compiled"] = check_cross_compiled(REPO / "gpu_artifacts")
    summary["bench"] = bench_examples(out_dir, major * 10 + minor)
    (out_dir / "bench.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
