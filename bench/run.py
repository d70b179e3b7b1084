"""Side-by-side CPU latency: eager PyTorch, AOTInductor and aotpack's C++ runtime, same process, same inputs.

    .venv/bin/python -m bench.run                      # every case, writes docs/performance.md
    .venv/bin/python -m bench.run --cases gpt2 --no-aoti --repeat 3

For each model: one aotpack package over the declared ranges and one AOTInductor package with the same
dynamic dims; every row runs the three on the same inputs, median of --repeat runs after a warm-up (WARMUP_S), with
the same thread count everywhere. Outputs are checked against eager before anything is timed.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Case:
    name: str
    model_file: str
    dynamic: dict[str, tuple[int, int]]  # overrides of the example's ranges
    rows: list[dict[str, int]]  # symbol values per timed row
    label: Callable[[dict[str, int]], str]
    full_size: bool = True  # AOTPACK_EXAMPLE_SIZE=full


CASES = {
    "gpt2": Case("GPT-2 124M, batch 1", "examples/gpt2/model.py", {"batch": (1, 2), "seq": (1, 2048)},
                 [{"batch": 1, "seq": 1}, {"batch": 1, "seq": 128}, {"batch": 1, "seq": 512}], lambda p: f"seq {p['seq']}"),
    "bert": Case("BERT-base", "examples/bert/model.py", {"batch": (1, 8), "seq": (1, 512)},
                 [{"batch": 8, "seq": 128}], lambda p: f"batch {p['batch']}, seq {p['seq']}"),
    "cnn": Case("CNN example", "examples/cnn/model.py", {}, [{"batch": 8, "height": 64, "width": 64}],
                lambda p: f"batch {p['batch']}, {p['height']}x{p['width']}", full_size=False),
}


@dataclass
class Result:
    case: str
    label: str
    ms: dict[str, float] = field(default_factory=dict)


# Each system runs for at least this long before it is timed. One call was not enough: on a 2-core KVM guest a
# thread pool whose workers sleep between loops (aotpack's) ran the CNN example's first 10-20 two-thread runs at
# one thread's speed (2.2-2.4 against 1.2-1.3 ms a run), until the host's halt polling adapted, so ten timed
# runs measured the warm-up (session 34).
WARMUP_S = 0.25


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    start = time.perf_counter()
    fn()
    while time.perf_counter() - start < WARMUP_S:
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _inputs(spec: Any, signature: dict[str, Any], point: dict[str, int], seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for info, example in zip(signature["inputs"], spec.example_inputs):
        shape = [point[d] if isinstance(d, str) else d for d in info["shape"]]
        if example.is_floating_point():
            out.append(torch.randn(shape, generator=gen).to(example.dtype))
        elif example.dtype == torch.bool or "mask" in info["name"]:
            out.append(torch.ones(shape, dtype=example.dtype))
        else:
            high = int(example.max()) + 1
            out.append(torch.randint(0, high, shape, generator=gen, dtype=example.dtype))
    return out


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def run_case(case: Case, threads: int, repeat: int, aoti: bool, workdir: Path) -> tuple[list[Result], dict[str, Any]]:
    from aotpack import runtime
    from aotpack.build import build_package
    from aotpack.exporter import capture, load_model_file, resolve_symbols
    from aotpack.lowering.frontend.decompositions import decompositions
    from aotpack.verification import relative_error

    os.environ["AOTPACK_EXAMPLE_SIZE"] = "full" if case.full_size else "small"
    spec = load_model_file(REPO / case.model_file)
    model = spec.model.eval()
    info: dict[str, Any] = {}

    start = time.perf_counter()
    plan = resolve_symbols(spec, case.dynamic)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    result = build_package(captured, workdir / f"{case.name.split()[0]}.aotpack")
    info["aotpack export s"] = time.perf_counter() - start
    info["aotpack package MB"] = result.size / 1e6
    session = runtime.Model(result.path).session(num_threads=threads)
    signature = result.manifest["signature"]

    compiled = None
    if aoti:
        start = time.perf_counter()
        with torch.no_grad():
            ep = torch.export.export(model, spec.example_inputs, dynamic_shapes=plan.dynamic_shapes)
            path = torch._inductor.aoti_compile_and_package(ep, package_path=str(workdir / f"{case.name.split()[0]}.pt2"))
        info["AOTInductor export+compile s"] = time.perf_counter() - start
        info["AOTInductor package MB"] = _size(Path(path)) / 1e6
        compiled = torch._inductor.aoti_load_package(path)

    rows = []
    for seed, point in enumerate(case.rows):
        inputs = _inputs(spec, signature, point, seed)
        arrays = [x.numpy() for x in inputs]
        with torch.no_grad():
            expected = model(*inputs)
        expected = expected[0] if isinstance(expected, (tuple, list)) else expected
        expected = getattr(expected, "logits", getattr(expected, "last_hidden_state", expected))
        got = session.run(arrays)[0]
        err = relative_error(got, expected.numpy())
        assert err <= 1e-4, f"{case.name} {point}: aotpack differs from eager (rel err {err:.2e})"
        row = Result(case.name, case.label(point))
        with torch.no_grad():
            row.ms["eager"] = _median_ms(lambda: model(*inputs), repeat)
            if compiled is not None:
                row.ms["AOTInductor"] = _median_ms(lambda: compiled(*inputs), repeat)
        row.ms["aotpack"] = _median_ms(lambda: session.run(arrays), repeat)
        rows.append(row)
        print(f"  {case.name} {row.label}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in row.ms.items()), flush=True)
    return rows, info


def matmul_throughput(threads: int, repeat: int, workdir: Path) -> dict[str, float]:
    """fp32 GFLOP/s of aotpack's matmul kernel and torch.mm at 512x768x3072 (a GPT-2 MLP at seq 512)."""
    from aotpack import runtime
    from aotpack.build import build_package
    from aotpack.exporter import ModelSpec, capture, resolve_symbols
    from aotpack.lowering.frontend.decompositions import decompositions

    m, k, n = 512, 768, 3072
    weight = torch.randn(k, n)

    class MatMul(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(weight)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.weight

    x = torch.randn(m, k)
    spec = ModelSpec(Path(__file__), MatMul(), (x,), ("x",), {}, {})
    plan = resolve_symbols(spec)
    result = build_package(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()), workdir / "mm.aotpack")
    session = runtime.Model(result.path).session(num_threads=threads)
    flops = 2 * m * n * k
    xs = x.numpy()
    return {"aotpack": flops / _median_ms(lambda: session.run([xs]), repeat) / 1e6,
            "torch.mm": flops / _median_ms(lambda: torch.mm(x, weight), repeat) / 1e6}


def write_markdown(path: Path, rows: list[Result], infos: dict[str, dict[str, Any]], mm: dict[str, float] | None,
                   threads: int, command: str) -> None:
    systems = [s for s in ("eager", "AOTInductor", "aotpack") if any(s in r.ms for r in rows)]
    lines = [
        "# Performance (CPU)",
        "",
        f"Generated by `{command}` on {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{threads} thread(s) for every system, torch {torch.__version__}. Median latency in ms after a warm-up; "
        "every system in one process on the same inputs; aotpack runs through its C++ runtime (ctypes call, "
        "output copied back). Ratios above 1 mean aotpack is faster. Absolute times hold for this machine only.",
        "",
        "| model | input | " + " | ".join(systems) + " | eager / aotpack | " +
        ("AOTInductor / aotpack |" if "AOTInductor" in systems else ""),
        "| --- | --- | " + " | ".join("---:" for _ in systems) + " | ---: |" +
        (" ---: |" if "AOTInductor" in systems else ""),
    ]
    for r in rows:
        cells = [f"{r.ms[s]:.1f}" if s in r.ms else "–" for s in systems]
        ratio = f"{r.ms['eager'] / r.ms['aotpack']:.2f}"
        aoti = f" {r.ms['AOTInductor'] / r.ms['aotpack']:.2f} |" if "AOTInductor" in r.ms else ""
        lines.append(f"| {r.case} | {r.label} | " + " | ".join(cells) + f" | {ratio} |{aoti}")
    lines += ["", "## Export", "", "| model | " + " | ".join(sorted({k for i in infos.values() for k in i})) + " |",
              "| --- |" + " ---: |" * len({k for i in infos.values() for k in i})]
    keys = sorted({k for i in infos.values() for k in i})
    for name, info in infos.items():
        lines.append(f"| {name} | " + " | ".join(f"{info[k]:.1f}" if k in info else "–" for k in keys) + " |")
    if mm:
        lines += ["", "## fp32 matmul, 512x768x3072", "",
                  f"aotpack {mm['aotpack']:.1f} GFLOP/s, torch.mm {mm['torch.mm']:.1f} GFLOP/s: "
                  f"{100 * mm['aotpack'] / mm['torch.mm']:.0f}% of torch.mm."]
    path.write_text(replace_generated(path.read_text() if path.exists() else "", "\n".join(lines)))


BEGIN, END = "<!-- generated by bench.run: begin -->", "<!-- generated by bench.run: end -->"


def replace_generated(document: str, generated: str) -> str:
    """`document` with the part between the markers replaced by `generated` (the rest of docs/performance.md is
    written by hand); a new document when it is empty. A document without the markers is an error, not
    overwritten."""
    block = f"{BEGIN}\n{generated}\n{END}\n"
    if not document:
        return block
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"the --out file has no {BEGIN} ... {END} block to replace; add the two lines where the "
                         "tables go, or pass another --out")
    return document[:start] + block + document[end + len(END) + 1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-aoti", action="store_true", help="skip AOTInductor (its compile takes ~30 s a model)")
    parser.add_argument("--out", default=str(REPO / "docs" / "performance.md"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows: list[Result] = []
    infos: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="aotpack-bench-") as tmp:
        mm = matmul_throughput(args.threads, max(args.repeat, 10), Path(tmp))
        print(f"  matmul 512x768x3072: {mm}", flush=True)
        for key in args.cases.split(","):
            case = CASES[key]
            case_rows, info = run_case(case, args.threads, args.repeat, not args.no_aoti, Path(tmp))
            rows += case_rows
            infos[case.name] = info
    command = "python -m bench.run " + " ".join(
        a for a in (f"--cases {args.cases}" if args.cases != ",".join(CASES) else "",
                    "--no-aoti" if args.no_aoti else "", f"--threads {args.threads}", f"--repeat {args.repeat}") if a)
    write_markdown(Path(args.out), rows, infos, mm, args.threads, command)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
