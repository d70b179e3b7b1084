"""The GPU acceptance run: real-size models exported in bfloat16 for CUDA, run by the C++ runtime.

    python scripts/gpu_acceptance.py OUT_DIR [gpt2 bert llama]
    python scripts/gpu_acceptance.py --report OUT_DIR > docs/gpu-acceptance.md   # the JSONs as a table

For each model (GPT-2 124M, BERT-base at batch 8, the Llama example at its 156M size), with seq=1..2048:
export for the local GPU's architecture (timed), then the time from opening the package file to the first
result (a cold start: digests, weights upload, cubin load), then at seq 1, 7, 128, 512 and 2048:

- accuracy against an fp32 eager reference on the GPU: aotpack's relative error must be at most 1.5 x eager
  bf16's own error + 1e-3, per output;
- latency (median) of eager bf16, torch.compile bf16 and aotpack, all on the same GPU and inputs. aotpack
  runs with device tensors in and out when the runtime offers it (`io="device"`), else host tensors; eager
  is also timed with the same host copies, so each aotpack figure has a like-for-like peer.

Writes OUT_DIR/acceptance_<model>.json and prints one line per measurement. Needs a GPU, transformers, Triton.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
SEQS = (1, 7, 128, 512, 2048)
# model: (the batch it runs at, --dynamic specs)
MODELS = {
    "gpt2": (1, ("batch=1..2", "seq=1..2048")),
    "bert": (8, ("batch=1..8", "seq=1..2048")),
    "llama": (1, ("batch=1..2", "seq=1..2048")),
}


def median_ms(fn, repeat: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return round(statistics.median(times), 3)


def make_inputs(name: str, module, batch: int, seq: int) -> list[torch.Tensor]:
    if hasattr(module, "padded_inputs"):  # BERT: padding mask and token types
        return list(module.padded_inputs(batch, seq, seed=seq))
    vocab = module.CONFIGS["full"]["vocab_size"]
    return [torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seq))]


def flat_outputs(value) -> list[torch.Tensor]:
    import torch.utils._pytree as pytree

    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def run_model(name: str, out_dir: Path, arch: int) -> dict:
    from aotpack import runtime
    from aotpack.api import export_model_file
    from aotpack.exporter import load_model_file
    from aotpack.verification import as_reference, from_runtime, judge, to_numpy

    os.environ["AOTPACK_EXAMPLE_SIZE"] = "full"
    batch, dynamic = MODELS[name]
    model_file = REPO / "examples" / name / "model.py"
    start = time.perf_counter()
    package = out_dir / f"{name}_bf16_cuda.aotpack"
    # As `aotpack export MODEL --dtype bf16 --target cuda --dynamic ...` runs it: verification on, over the range.
    result = export_model_file(model_file, package, dynamic=dynamic, dtype="bf16", target="cuda", cuda_arch=str(arch))
    row: dict = {"model": name, "batch": batch, "export_s": round(time.perf_counter() - start, 1),
                 "package_mb": round(package.stat().st_size / 1e6, 1), "export_verification": result.verification}

    reference = load_model_file(model_file)  # the same seeded weights, in float32
    ref_model = reference.model.eval().cuda()
    bf16_model = copy.deepcopy(reference.model).to(torch.bfloat16).eval().cuda()
    module = example_module(model_file)
    compiled = torch.compile(bf16_model)

    first = make_inputs(name, module, batch, SEQS[0])
    start = time.perf_counter()
    aot_model = runtime.Model(package)
    session = aot_model.session(device="cuda")
    session.run([to_numpy(x) for x in first])
    row["open_to_first_result_ms"] = round((time.perf_counter() - start) * 1e3, 1)
    row["cold_process_ms"] = _cold_process_ms(package, first)
    device_io = _device_session(aot_model)
    row["aotpack_io"] = "device" if device_io is not None else "host"

    row["points"] = []
    for seq in SEQS:
        inputs = make_inputs(name, module, batch, seq)
        dev = [x.cuda() for x in inputs]
        with torch.no_grad():
            ref = [t.float() for t in flat_outputs(ref_model(*dev))]
            eager = [t.float() for t in flat_outputs(bf16_model(*dev))]
        ours = session.run([to_numpy(x) for x in inputs])
        if device_io is not None:  # the device-I/O path must give the host path's results exactly
            same = [np.array_equal(to_numpy(d.to_torch().cpu()), h) for d, h in zip(device_io.run(dev), ours)]
        point = {"seq": seq, "outputs": []}
        if device_io is not None:
            point["device_io_equals_host_io"] = all(same)
        for out, r, e, info in zip(ours, ref, eager, aot_model.outputs):
            dtype = str(info.dtype)
            j = judge(info.name, dtype, from_runtime(out, getattr(torch, dtype)), as_reference(r), as_reference(e))
            point["outputs"].append({"name": info.name, "aotpack_err": float(f"{j.error:.3e}"),
                                     "eager_bf16_err": float(f"{j.half_error:.3e}"), "ok": j.passed})

        def eager_run():
            with torch.no_grad():
                bf16_model(*dev)

        def eager_host_run():  # eager with the copies a host-tensor caller of aotpack pays
            with torch.no_grad():
                [t.cpu() for t in flat_outputs(bf16_model(*[x.cuda() for x in inputs]))]

        def compiled_run():
            with torch.no_grad():
                compiled(*dev)

        repeat = 20 if seq <= 512 else 10
        host = [to_numpy(x) for x in inputs]
        point["eager_ms"] = median_ms(eager_run, repeat)
        point["eager_host_io_ms"] = median_ms(eager_host_run, repeat)
        try:
            compiled_run()
            point["torch_compile_ms"] = median_ms(compiled_run, repeat)
        except Exception as e:  # noqa: BLE001 - torch.compile needs a working Inductor toolchain on the image
            point["torch_compile_ms"] = f"failed: {type(e).__name__}: {str(e)[:200]}"
        point["aotpack_host_io_ms"] = median_ms(lambda: session.run(host), repeat)
        if device_io is not None:
            point["aotpack_ms"] = median_ms(lambda: device_io.run(dev), repeat)
        row["points"].append(point)
        print(json.dumps({"model": name, **point}), flush=True)
    row["ok"] = all(o["ok"] for p in row["points"] for o in p["outputs"])
    return row


def _cold_process_ms(package: Path, inputs: list[torch.Tensor]) -> float | None:
    """Wall time of a fresh `aotpack-run --device cuda` process, from start to its first result: loading the
    package (digests), creating the CUDA context, uploading weights, loading cubins, one run."""
    import subprocess

    tool = REPO / "build" / "runtime" / "aotpack-run"
    if not tool.exists():
        return None
    syms = [f"--sym=batch={inputs[0].shape[0]}", f"--sym=seq={inputs[0].shape[1]}"]
    start = time.perf_counter()
    done = subprocess.run([str(tool), str(package), "--device", "cuda", *syms], capture_output=True, text=True,
                          check=False)
    elapsed = round((time.perf_counter() - start) * 1e3, 1)
    return elapsed if done.returncode == 0 else None


def example_module(model_file: Path):
    """The example's module (make_inputs reads its CONFIGS and helpers)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"example_{model_file.parent.name}", model_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _device_session(model):
    """A session taking and returning device tensors, where this runtime build offers one."""
    try:
        return model.session(device="cuda", io="device")
    except TypeError:  # a runtime binding without device I/O
        return None


def report(directory: Path) -> str:
    """Markdown tables of the acceptance JSONs in `directory`: accuracy and latency per model and length."""
    header = ("Generated by `python scripts/gpu_acceptance.py --report DIR` from `scripts/gpu_acceptance.py DIR` "
              "on a GPU machine. Errors are relative (norm) errors against the model in float32 eager on the same "
              "GPU; pass: aotpack's error <= 1.5 x eager bf16's + 1e-3. Latencies are medians, in ms; aotpack's are "
              "with device tensors in and out (`io=\"device\"`) and, in parentheses, with host tensors.")
    lines = ["# GPU acceptance (issue 4)", "", header, ""]
    for path in sorted(directory.glob("acceptance_*.json")):
        row = json.loads(path.read_text())
        lines.append(f"## {row['model']} ({row.get('device', '?')}, torch {row.get('torch', '?')})")
        lines.append("")
        if "error" in row:
            lines += [f"Failed: `{row['error'].splitlines()[0]}`", ""]
            continue
        lines.append(f"Batch {row['batch']}; export {row['export_s']} s, package {row['package_mb']} MB; open to "
                     f"first result {row['open_to_first_result_ms']} ms in a running process, "
                     f"{row.get('cold_process_ms')} ms as a fresh `aotpack-run --device cuda` process.")
        lines += ["", "| seq | aotpack err | eager bf16 err | pass | eager | torch.compile | aotpack (host I/O) "
                      "| eager/aotpack | compile/aotpack |", "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
        for p in row["points"]:
            worst = max(p["outputs"], key=lambda o: o["aotpack_err"] - 1.5 * o["eager_bf16_err"])
            ours = p.get("aotpack_ms", p["aotpack_host_io_ms"])
            compiled = p["torch_compile_ms"]
            ratio = f"{compiled / ours:.2f}" if isinstance(compiled, float) else "-"
            lines.append(f"| {p['seq']} | {worst['aotpack_err']:.2e} | {worst['eager_bf16_err']:.2e} | "
                         f"{'yes' if all(o['ok'] for o in p['outputs']) else '**no**'} | {p['eager_ms']} | {compiled} | "
                         f"{ours} ({p['aotpack_host_io_ms']}) | {p['eager_ms'] / ours:.2f} | {ratio} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    if sys.argv[1] == "--report":
        print(report(Path(sys.argv[2])))
        return 0
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    names = sys.argv[2:] or list(MODELS)
    major, minor = torch.cuda.get_device_capability(0)
    status = 0
    for name in names:
        try:
            row = run_model(name, out_dir, major * 10 + minor)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            import traceback

            traceback.print_exc()
            row, status = {"model": name, "error": f"{type(e).__name__}: {str(e)[:2000]}"}, 1
        row["device"], row["torch"] = torch.cuda.get_device_name(0), torch.__version__
        (out_dir / f"acceptance_{name}.json").write_text(json.dumps(row, indent=1))
        print(json.dumps({k: v for k, v in row.items() if k != "points"}), flush=True)
        status |= 0 if row.get("ok") else 1
    return status


if __name__ == "__main__":
    sys.exit(main())
