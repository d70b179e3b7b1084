"""The Triton matrix product alone, per bucket configuration, against cuBLAS and the memory bandwidth.

    python scripts/gpu_matmul_bench.py OUT_DIR [--sweep | --persistent | --split] [--rows 1,16] [--shapes a,b]
                                       [--budget-s S]

For the projection shapes of GPT-2 124M, BERT-base and the Llama shape of docs/performance.md (bf16, weights
read as nn.Linear and GPT-2's Conv1D store them), at M = 1, 16, 128, 512, 2048 (and BERT's batch 8 x 2048),
plus 4096^3: renders the product through the exporter's own renderer for this GPU (lowering/backends/cuda/
render.py, the bucket's configuration from matmul_config.py), checks it against torch, and times it with
triton.testing.do_bench_cudagraph (kernel time, no launch overhead), next to torch.matmul (cuBLAS) and the
bytes it must move at the measured copy bandwidth. Each timed call runs over enough copies of the weight
(at least 256 MB in all) that none is in the 50 MB L2 when it is read, as a model's layers find theirs.
--sweep also times other tile configurations, to tune matmul_config.py's table, and on sm_90+ the persistent
TMA programs tuning offers (matmul_config.PERSISTENT_CANDIDATES, with and without warp specialisation), rendered
through the same renderer (templates/triton/matmul_persistent.py.jinja). Writes OUT_DIR/matmul_bench.json and
prints one line per measurement. --persistent times only the tiled table's choice, the persistent programs (those
storing through TMA too: matmul_config.PERSISTENT_TMA_STORE_CANDIDATES, "tma store") and the tiled programs
tuning times with TMA loads (matmul_config.TILED_TMA_CANDIDATES, each next to its pointer-load twin).
"table" in the output is the tiled template's table; where a package for this GPU gets a persistent program
instead (sm_90+, matmul_config._persistent_tiles), that program is timed too. --split times, for products of
at most 16 rows, split-K programs (matmul_config.SPLIT_TILES x SPLIT_KS, and the tiles unsplit for comparison)
next to the table's choice; for more rows, the large tiles whole and split (matmul_config.SPLIT_ROW_TILES and
128 x 128 and 128 x 256, x SPLIT_ROW_KS). Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import sympy
import torch
import triton
from triton.testing import do_bench_cudagraph

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "codegen")]

# name: (N, K, weight layout): "linear" stores [N, K] (read transposed), "conv1d" [K, N]
SHAPES = {
    "gpt2_qkv": (2304, 768, "conv1d"), "gpt2_attn_out": (768, 768, "conv1d"), "gpt2_mlp_up": (3072, 768, "conv1d"),
    "gpt2_mlp_down": (768, 3072, "conv1d"), "gpt2_logits": (50257, 768, "linear"),
    "llama_q": (1024, 1024, "linear"), "llama_kv": (256, 1024, "linear"), "llama_mlp_up": (2816, 1024, "linear"),
    "llama_mlp_down": (1024, 2816, "linear"), "llama_logits": (32000, 1024, "linear"),
    "bert_qkv": (768, 768, "linear"), "bert_mlp_up": (3072, 768, "linear"), "bert_mlp_down": (768, 3072, "linear"),
}
ROWS = (1, 16, 128, 512, 2048)
BERT_ROWS = (16384,)  # batch 8 x seq 2048
SQUARE = 4096
# (BM, BN, BK, warps, stages) tried besides the table's choice with --sweep
CANDIDATES = [(16, 16, 128, 4, 4), (16, 32, 128, 4, 4), (16, 64, 128, 4, 4), (16, 64, 256, 4, 3),
              (16, 16, 256, 4, 4), (16, 16, 512, 4, 3), (16, 32, 256, 4, 4), (16, 32, 512, 4, 3),
              (16, 16, 512, 8, 3), (16, 32, 512, 8, 3), (16, 64, 512, 8, 2), (16, 16, 1024, 8, 2),
              (32, 64, 128, 4, 4), (64, 32, 128, 4, 4), (64, 64, 64, 4, 4), (64, 128, 64, 4, 4),
              (128, 64, 64, 4, 4), (128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3)]


def product_program(n: int, k: int, layout: str, hi: int):
    from aotpack.lowering.ir.kernels import Buffer, MatmulKernel, Program, StridedView, Symbol
    from aotpack.lowering.ir.symbolic import size_symbol

    rows, zero, one = size_symbol("rows"), sympy.Integer(0), sympy.Integer(1)
    x = Buffer("x", "bfloat16", (rows, sympy.Integer(k)), "input", "x")
    w_shape = (n, k) if layout == "linear" else (k, n)
    w = Buffer("w", "bfloat16", tuple(sympy.Integer(d) for d in w_shape), "weight", "w")
    out = Buffer("out", "bfloat16", (rows, sympy.Integer(n)), "output", "out")
    b_strides = (zero, one, sympy.Integer(k)) if layout == "linear" else (zero, sympy.Integer(n), one)
    step = MatmulKernel("out", StridedView("x", zero, (zero, sympy.Integer(k), one)), StridedView("w", zero, b_strides),
                        one, rows, sympy.Integer(n), sympy.Integer(k), "bfloat16")
    return Program((Symbol("rows", 1, hi),), {b.name: b for b in (x, w, out)}, (step,), ("x",), ("out",))


def rendered_launcher(program, arch: int, prelude: str, config, m: int):
    """The program's product at `config` (a persistent TMA program or a split-K one), rendered as an export
    renders it: a function of (x, weight, out) that launches it at m rows."""
    import triton_interp
    from aotpack.lowering.backends.cuda.render import TritonRenderer
    from aotpack.lowering.ir.symbolic import evaluate, size_symbol

    renderer = TritonRenderer(program, arch, pdl=arch >= 90, tma=True)
    kernel, grid = renderer.render_with(program.steps[0], config)
    module = triton_interp.load_module(prelude + "\n" + kernel.source, False)
    fn = getattr(module, kernel.name)
    blocks = tuple(evaluate(g, {size_symbol("rows"): m}) for g in grid)
    constexprs = dict(kernel.constexprs)
    split = split_workspace(kernel)
    return lambda x, w, out: fn[blocks](x, w, out, m, *split, **constexprs, num_warps=kernel.num_warps,
                                        num_stages=kernel.num_stages)


def split_workspace(kernel) -> list:
    """A split-K kernel's extra arguments as the runtime passes them: its counts, zero (every launch leaves them
    so), and its partial sums' workspace; none for another kernel."""
    if not kernel.split_programs:
        return []
    return [torch.zeros(kernel.split_programs, dtype=torch.int32, device="cuda"),
            torch.empty(kernel.split_programs * kernel.split_tile_bytes // 4, dtype=torch.float32, device="cuda")]


def persistent_choice(library, m: int):
    """The persistent TMA configuration a package's library launches at m rows, or None (a tiled kernel)."""
    from aotpack.lowering.backends.cuda.matmul_config import MatmulConfig

    variants = library.variants_of(0)
    chosen = next((v for v in variants.variants if m <= v.upto), None) if variants is not None else None
    name = chosen.kernel if chosen is not None else library.step_kernels[0]
    kernel = next(k for k in library.kernels if k.name == name)
    if not kernel.persistent:
        return None
    c = dict(kernel.constexprs)
    return MatmulConfig(c["BM"], c["BN"], c["BK"], c["GROUP_M"], kernel.num_warps, kernel.num_stages, True,
                        bool(c["WARP_SPECIALIZE"]))


def copy_bandwidth() -> float:
    """GB/s of a device-to-device copy of 1 GiB, counting the bytes read and written."""
    src = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench_cudagraph(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / ms / 1e6


def main() -> int:
    import triton_interp
    from aotpack.lowering.backends.cuda.matmul_config import (
        PERSISTENT_CANDIDATES,
        PERSISTENT_TMA_STORE_CANDIDATES,
        SPLIT_KS,
        SPLIT_ROW_KS,
        SPLIT_ROW_TILES,
        SPLIT_TILES,
        TILED_TMA_CANDIDATES,
        MatmulConfig,
    )
    from aotpack.lowering.backends.cuda.render import TritonRenderer, render_triton_library
    from aotpack.lowering.codegen.library import render_library
    from aotpack.lowering.ir.symbolic import evaluate, size_symbol

    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--persistent", action="store_true", help="the table's choice and the persistent programs")
    parser.add_argument("--split", action="store_true", help="the table's choice and split-K programs")
    parser.add_argument("--rows", default=None, help="comma-separated row counts instead of the default set")
    parser.add_argument("--shapes", default=None, help="comma-separated names of SHAPES (and square_4096)")
    parser.add_argument("--budget-s", type=float, default=1e9)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    major, minor = torch.cuda.get_device_capability(0)
    arch = major * 10 + minor
    # persistent TMA programs make their descriptors in global scratch, which Triton's launcher asks for here
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    copy_gbs = copy_bandwidth()
    print(f"copy bandwidth: {copy_gbs:.0f} GB/s (1 GiB read + written)", flush=True)
    results = {"device": torch.cuda.get_device_name(0), "arch": arch, "copy_gb_s": copy_gbs, "points": []}
    if args.rows:
        cases = [(name, m) for name in SHAPES for m in map(int, args.rows.split(","))]
    else:
        cases = [(name, m) for name in SHAPES for m in (ROWS + (BERT_ROWS if name.startswith("bert") else ()))]
        cases.append(("square_4096", SQUARE))
    if args.shapes:
        names = args.shapes.split(",")
        cases = [(name, m) for name, m in cases if name in names]
        if "square_4096" in names and args.rows:
            cases.append(("square_4096", SQUARE))
    for name, m in cases:
        if time.monotonic() - start > args.budget_s:
            print(f"budget spent: stopping before {name} M={m}", flush=True)
            break
        n, k, layout = SHAPES.get(name, (SQUARE, SQUARE, "linear"))
        program = product_program(n, k, layout, max(m, 2))
        # the tiled template's table (what the sweep varies), and what a package for this GPU gets, which on
        # sm_90+ may be a persistent TMA program (matmul_config._persistent_tiles): timed below with the others
        library = render_library(TritonRenderer(program, arch, pdl=arch >= 90))
        package = render_triton_library(program, (arch,))
        package_config = persistent_choice(package, m)
        module = triton_interp.load_module(library.source, False)
        values = {size_symbol("rows"): m}
        variants = library.variants_of(0)
        kname, grid = library.step_kernels[0], library.step_launches[0]
        if variants is not None:
            chosen = next((v for v in variants.variants if m <= v.upto), None)
            if chosen is not None:
                kname, grid = chosen.kernel, chosen.launch
        kernel = next(kk for kk in library.kernels if kk.name == kname)
        fn = getattr(module, kname)
        torch.manual_seed(0)
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(*((n, k) if layout == "linear" else (k, n)), dtype=torch.bfloat16, device="cuda") / k ** 0.5
        copies = [w] + [w.clone() for _ in range(max(0, min(63, -(-(256 << 20) // (2 * n * k)) - 1)))]
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        ref = x @ (w.T if layout == "linear" else w)
        table = dict(kernel.constexprs)
        configs = [(table["BM"], table["BN"], table["BK"], kernel.num_warps, kernel.num_stages)]
        if args.sweep:
            configs += [c for c in CANDIDATES if c not in configs]
        bytes_moved = 2 * (m * k + k * n + m * n)
        weights_t = [c.T if layout == "linear" else c for c in copies]
        cublas_ms = do_bench_cudagraph(lambda x=x: [torch.matmul(x, bb) for bb in weights_t]) / len(copies)
        point = {"shape": name, "m": m, "n": n, "k": k, "layout": layout, "cublas_ms": cublas_ms, "configs": []}
        # A split-K table kernel takes its counts and partial sums (sized for the table's tiles, so the sweep's
        # other tiles are not timed with it) and its other constexprs (SPLIT_K), as rendered_launcher passes them.
        split = split_workspace(kernel)
        for bm, bn, bk, warps, stages in configs:
            if split and (bm, bn, bk) != (table["BM"], table["BN"], table["BK"]):
                continue
            launch_grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), 1, 1) if (bm, bn) != (table["BM"], table["BN"]) \
                else tuple(evaluate(g, values) for g in grid)

            def run(bm=bm, bn=bn, bk=bk, warps=warps, stages=stages, launch_grid=launch_grid, fn=fn, x=x,
                    out=out, m=m, split=split, table=table, weights=(w,)):
                for weight in weights:
                    fn[launch_grid](x, weight, out, m, *split, **{**table, "BM": bm, "BN": bn, "BK": bk},
                                    num_warps=warps, num_stages=stages)

            try:
                run()
                torch.cuda.synchronize()
                err = float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
                ms = do_bench_cudagraph(lambda run=run: run(weights=copies)) / len(copies)
            except Exception as e:  # noqa: BLE001 - a configuration can exceed shared memory: report, go on
                point["configs"].append({"config": [bm, bn, bk, warps, stages], "error": str(e)[:200]})
                continue
            point["configs"].append({"config": [bm, bn, bk, warps, stages], "ms": ms, "rel_err": err,
                                     "gb_s": bytes_moved / ms / 1e6, "tflops": 2 * m * n * k / ms / 1e9})
        persistent_configs = []
        if (args.sweep or args.persistent) and arch >= 90 and m >= 128:
            persistent_configs = [MatmulConfig(bm, bn, bk, 8, warps, stages, True, ws)
                                  for bm, bn, bk, warps, stages, _ in PERSISTENT_CANDIDATES for ws in (False, True)]
            # persistent programs storing their tiles through TMA (session 31's tuning candidates)
            persistent_configs += [MatmulConfig(bm, bn, bk, 8, warps, stages, True, tma_store=True)
                                   for bm, bn, bk, warps, stages in PERSISTENT_TMA_STORE_CANDIDATES]
            # tiled programs loading through TMA (session 29's tuning candidates), each beside its pointer twin
            persistent_configs += [MatmulConfig(bm, bn, bk, 8, warps, stages, tma=tma)
                                   for bm, bn, bk, warps, stages in TILED_TMA_CANDIDATES for tma in (False, True)]
        if package_config is not None and package_config not in persistent_configs:
            persistent_configs.append(package_config)
        if args.split and m <= 16:
            persistent_configs += [MatmulConfig(bm, bn, bk, 8, warps, stages, split_k=splits)
                                   for bm, bn, bk, warps, stages in SPLIT_TILES for splits in (1, *SPLIT_KS)
                                   if k >= splits * bk]
        elif args.split:  # 64-row tiles and the large ones, whole and split
            persistent_configs += [MatmulConfig(bm, bn, bk, 8, warps, stages, split_k=splits)
                                   for bm, bn, bk, warps, stages in (*SPLIT_ROW_TILES, (128, 128, 64, 8, 3),
                                                                     (128, 256, 64, 8, 3))
                                   for splits in (1, *SPLIT_ROW_KS)
                                   if k >= 2 * splits * bk and bm <= max(16, triton.next_power_of_2(m))]
        for config in persistent_configs:
            label = [config.bm, config.bn, config.bk, config.num_warps, config.num_stages,
                     *(["persistent", "ws" if config.warp_specialize else "no ws",
                        *(["tma store"] if config.tma_store else [])] if config.persistent
                       else ["tiled", "tma" if config.tma else "pointers"] if config.split_k == 1
                       else [f"split {config.split_k}"])]
            try:
                launch = rendered_launcher(program, arch, library.prelude, config, m)
                out.fill_(float("nan"))
                launch(x, w, out)
                torch.cuda.synchronize()
                err = float((out.float() - ref.float()).abs().max() / ref.float().abs().max())
                ms = do_bench_cudagraph(lambda launch=launch, x=x, out=out, copies=copies: [launch(x, c, out) for c in copies]) / len(copies)
            except Exception as e:  # noqa: BLE001 - report, go on
                point["configs"].append({"config": label, "error": str(e)[:200]})
                continue
            point["configs"].append({"config": label, "ms": ms, "rel_err": err, "gb_s": bytes_moved / ms / 1e6,
                                     "tflops": 2 * m * n * k / ms / 1e9})
        wrong = [c for c in point["configs"] if c.get("rel_err", 0) > 2e-2 or c.get("rel_err") != c.get("rel_err")]
        if wrong:
            print(f"{name} M={m}: WRONG RESULTS from {[(c['config'], c['rel_err']) for c in wrong]}", flush=True)
        ok = [c for c in point["configs"] if "ms" in c and c not in wrong]
        if not ok:
            print(f"{name} M={m}: every configuration failed: {point['configs'][0]}", flush=True)
            results["points"].append(point)
            continue
        table_entry, best = ok[0], min(ok, key=lambda c: c["ms"])
        point["table"], point["best"] = table_entry, best
        results["points"].append(point)
        print(f"{name:15} M={m:>5} N={n:>5} K={k:>4}: table {table_entry['config']} {table_entry['ms'] * 1e3:8.1f} us "
              f"({table_entry['gb_s'] / copy_gbs:5.0%} of copy bw, {table_entry['tflops']:6.1f} TFLOP/s, "
              f"{cublas_ms / table_entry['ms']:5.0%} of cuBLAS {cublas_ms * 1e3:.1f} us, err {table_entry['rel_err']:.1e})"
              + (f"; best {best['config']} {best['ms'] * 1e3:.1f} us" if args.sweep or args.persistent else "")
              + (f"; best persistent {min(persistent, key=lambda c: c['ms'])['config']} "
                 f"{min(c['ms'] for c in persistent) * 1e3:.1f} us" if (persistent := [c for c in ok if "persistent" in c["config"]]) else "")
              + (f"; best split {min(split, key=lambda c: c['ms'])['config']} {min(c['ms'] for c in split) * 1e3:.1f} us"
                 if (split := [c for c in ok if str(c["config"][-1]).startswith("split")]) else ""),
              flush=True)
        (args.out / "matmul_bench.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
