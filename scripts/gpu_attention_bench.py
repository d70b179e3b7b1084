"""The Triton attention kernel alone, against torch's own sdpa, over block configurations (a tuning aid).

    python scripts/gpu_attention_bench.py [SEQ ...] [SHAPE ...] [--cold] [--chosen-only]   # default: 512 2048, every shape
    python scripts/gpu_attention_bench.py SEQ SHAPE --names   # the shape's kernel name at that seq (no GPU needed)

For each shape (BERT-like with a boolean padding mask and with transformers' additive one, GPT-2-like causal, Llama-like causal with grouped-query heads
at head dims 64 and 128), in bfloat16: lowers a one-layer sdpa model, runs its program's kernels through
Triton's JIT (tests/codegen/triton_interp.py) to check the result against eager, then times the attention
kernel at the configuration the exporter picks and at others, next to torch.nn.functional's sdpa on the same
inputs; where the layout allows it, also the kernel rendered with TMA loads of its keys and values at the blocks
(attention_config.TMA_CANDIDATES, lines marked "tma"; tuning does not offer them). Prints one line per measurement:
milliseconds and TFLOP/s; after the chosen configuration's, the same timed for about a second with the SM clock
and power sampled beside it (scripts/gpu_clock.py), to compare with a model's run at the clock it runs at. Needs
a GPU.
"""

from __future__ import annotations

import copy
import functools
import statistics
import sys
from pathlib import Path

import torch
import triton

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "codegen"), str(REPO / "tests" / "e2e"), str(REPO / "scripts")]
import gpu_clock  # found through the line above: the scripts folder is not a package

# name: (batch, SelfAttention(heads, kv_heads, dim, value_dim, causal, mask))
SHAPES = {
    "bert_pad_b8_d64": (8, (12, 12, 64, 64, False, "padding_bool")),
    "bert_additive_b8_d64": (8, (12, 12, 64, 64, False, "padding_additive")),
    # the padding of gpu_bench's BERT inputs (examples/bert padded_inputs: 15/16 down to 8/16 of the keys live)
    "bert_example_pad_b8_d64": (8, (12, 12, 64, 64, False, "padding_bool")),
    # the same with the padding as transformers' int64 attention_mask, as BERT's package reads it
    "bert_example_long_b8_d64": (8, (12, 12, 64, 64, False, "padding_bool")),
    "gpt2_causal_b1_d64": (1, (12, 12, 64, 64, True, None)),
    "llama_gqa_b1_d64": (1, (16, 4, 64, 64, True, None)),
    "gqa_causal_b1_d128": (1, (32, 8, 128, 128, True, None)),
}
# (BM, BN, num_warps, num_stages, maxnreg) tried besides the exporter's choice; maxnreg: ptxas's register cap per
# thread (None: its own choice), 128 lets four 4-warp programs share an SM's 64K registers
CONFIGS = [(128, 64, 8, 2, None), (128, 64, 4, 3, None), (128, 64, 8, 3, None), (128, 128, 8, 3, None),
           (64, 64, 4, 2, None), (64, 64, 8, 3, None), (64, 64, 4, 4, None), (64, 32, 4, 3, None), (64, 128, 4, 3, None),
           (32, 64, 4, 3, None), (64, 64, 4, 2, 128), (64, 64, 4, 3, 128), (64, 32, 4, 3, 128), (64, 32, 4, 2, 128),
           # head dim 128 (sdpa 1.2x faster in session 34): two warp groups over narrow key blocks, 128 registers
           # and 64 / 80 KB of shared memory where the table's 64 x 64 takes 216 and 112 KB (one program an SM)
           (128, 32, 8, 2, None), (128, 32, 8, 3, None)]


def example_pad(batch: int, seq: int) -> torch.Tensor:
    """examples/bert's padding as a 0/1 float mask: sequence b keeps max(1, seq - (b + 1) * seq // (2 * batch))."""
    lengths = torch.tensor([max(1, seq - (b + 1) * seq // (2 * batch)) for b in range(batch)])
    return (torch.arange(seq)[None, :] < lengths[:, None]).float()


CHOSEN_ONLY = "--chosen-only" in sys.argv  # the exporter's configuration alone, not CONFIGS
NAMES = "--names" in sys.argv  # each shape's attention kernel name, and nothing else
COLD = "--cold" in sys.argv  # each launch timed alone after the L2 cache was flushed, as a model's reads find it
_flush: list = []


def cold_ms(fn, repeat: int = 10) -> float:
    """Median of single launches, each after 256 MB were written (more than the 50 MB L2 holds)."""
    if not _flush:
        _flush.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    fn()
    times = []
    for _ in range(repeat):
        _flush[0].zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def cuda_ms(fn, repeat: int = 30) -> float:
    if COLD:
        return cold_ms(fn)
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat


def main() -> int:
    import triton_interp
    from aotpack.exporter import ModelSpec, capture, resolve_symbols
    from aotpack.exporter.dtype import with_dtype
    from aotpack.lowering.backends.cuda import render
    from aotpack.lowering.backends.cuda.attention_config import TMA_CANDIDATES, AttentionConfig
    from aotpack.lowering.backends.cuda.compile import FP_FUSION  # as packages compile their kernels
    from aotpack.lowering.backends.cuda.render import render_triton_library
    from aotpack.lowering.frontend.decompositions import decompositions
    from aotpack.lowering.ir.symbolic import evaluate
    from aotpack.lowering.stages import lower
    from aotpack.verification import relative_error
    from test_attention import SelfAttention, _pad

    # TMA kernels make their descriptors in global scratch, which Triton's launcher takes from this allocator
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    seqs = [int(a) for a in sys.argv[1:] if a.isdigit()] or [512, 2048]
    shapes = [a for a in sys.argv[1:] if not a.isdigit() and not a.startswith("--")] or list(SHAPES)
    for name, (batch, args) in ((name, SHAPES[name]) for name in shapes):
        torch.manual_seed(0)
        heads, kv_heads, dim, value_dim, causal, mask = args
        model = SelfAttention(*args).eval()
        reference = copy.deepcopy(model)  # float32; the spec's model is converted to bfloat16
        spec_pad = _pad(2, 8).long() if "long" in name else _pad(2, 8)
        spec = with_dtype(ModelSpec(REPO, model, (torch.randn(2, 8, 16), spec_pad), ("x", "pad"),
                                    {"x": {0: "batch", 1: "seq"}, "pad": {0: "batch", 1: "seq"}},
                                    {"batch": (1, 8), "seq": (1, max(seqs))}), torch.bfloat16)
        plan = resolve_symbols(spec)
        program = lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))
        library = render_triton_library(program)
        step = next(i for i, s in enumerate(program.steps) if s.family == "attention")
        kernel = next(k for k in library.kernels if k.name == library.step_kernels[step])
        if NAMES:  # for a kernel profiler's filter (scripts/gpu_attention_ncu.sh): no GPU work
            print(name, kernel.name, flush=True)
            continue
        chosen = dict(kernel.constexprs)
        # the same step rendered with TMA loads, where its keys' and values' layout allows them
        tma_renderer = render.TritonRenderer(program, 90, tma=True)
        tma_kernel = None
        if tma_renderer.attention_tma(program.steps[step]):
            tma_kernel, _ = tma_renderer.render_with(program.steps[step], AttentionConfig(*TMA_CANDIDATES[0], tma=True))
        for seq in seqs:
            x = torch.randn(batch, seq, 16, dtype=torch.bfloat16)
            pad = example_pad(batch, seq) if "example" in name else _pad(batch, seq)
            pad = pad.long() if "long" in name else pad.to(torch.bfloat16)
            with torch.no_grad():
                ref = reference(x.float(), pad.float())
            # the program's buffers after one run through Triton's JIT, to launch its attention step alone
            state: dict = {}
            outs, errors = triton_interp.run_program(program, library, [x, pad], device="cuda", interpret=False,
                                                     state=state)
            err = relative_error(outs[0].float().cpu().numpy(), ref.numpy())
            flops = 4 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
            call = [state["buffers"][a] for a in library.step_args[step]]
            call += [state["sym_values"][i] for i in kernel.symbols]
            if kernel.errors:
                call.append(torch.zeros(1, dtype=torch.int32, device="cuda"))
            # Compiled as packages compile it: Triton's JIT would assume a size divisible by 16 to be so at every
            # call (seq 2048 here), which packages cannot, and BERT's padded attention timed 0.32 ms here against
            # 0.47 in the model (session 23); pointers stay 16-byte aligned, as the runtime's are.
            sizes = [n for n, t in kernel.signature if t in ("i32", "i64")]

            def compiled_as_packages(source: str, name: str, sizes: list[str] = sizes):
                return triton.jit(getattr(triton_interp.load_module(source, False), name).fn, do_not_specialize=sizes)

            fn = compiled_as_packages(library.source, kernel.name)
            variants = [(fn, config, "") for config in dict.fromkeys(
                [(chosen["BM"], chosen["BN"], kernel.num_warps, kernel.num_stages, None),
                 *([] if CHOSEN_ONLY else CONFIGS)])]
            if tma_kernel is not None and not CHOSEN_ONLY:
                tma_fn = compiled_as_packages(library.prelude + "\n" + tma_kernel.source, tma_kernel.name)
                variants += [(tma_fn, (*c, None), " tma") for c in TMA_CANDIDATES]
            rows = evaluate(library.step_launches[step][1], state["values"])
            print(f"{name} seq {seq}: rel err vs fp32 eager {err:.2e} {errors or ''}; chosen {chosen} "
                  f"warps {kernel.num_warps} stages {kernel.num_stages}{' (cold L2)' if COLD else ''}; reads k as "
                  f"{next(line.strip() for line in kernel.source.splitlines() if 'k_base = ' in line)}", flush=True)
            out = call[[n for n, _ in kernel.signature].index("out")]
            first = None  # the chosen configuration's output: every other one is compared with it
            for fn, (bm, bn, warps, stages, maxnreg), how in variants:
                launch = functools.partial(fn[(triton.cdiv(seq, bm), rows, 1)], *call,
                                           **{**chosen, "BM": bm, "BN": bn},
                                           num_warps=warps, num_stages=stages, enable_fp_fusion=FP_FUSION,
                                           **({"maxnreg": maxnreg} if maxnreg else {}))
                try:
                    ms = cuda_ms(launch)
                except Exception as e:  # noqa: BLE001 - a config can exceed shared memory; report and go on
                    print(f"  BM {bm} BN {bn} w{warps} s{stages} r{maxnreg}{how}: failed {type(e).__name__}: {str(e)[:2000]}")
                    continue
                chosen_line = first is None
                first = out.float().clone() if first is None else first
                diff = float((out.float() - first).abs().max())
                print(f"  BM {bm:>3} BN {bn:>3} w{warps} s{stages} r{maxnreg}{how}: {ms:7.3f} ms {flops / ms / 1e9:6.1f} TFLOP/s"
                      f"  max diff to the chosen {diff:.2e}")
                if chosen_line and not COLD:
                    # the chosen blocks again for about a second, with the SM clock sampled (scripts/gpu_clock.py):
                    # a model's kernels run at the clock its products leave, which a 30-launch series may not reach
                    with gpu_clock.GpuClock(gpu_clock.nvidia_smi_id(0)) as clock:
                        sustained = cuda_ms(launch, repeat=max(30, int(1000 / ms)))
                    c = clock.summary()
                    at = (f"SM clock median {c['sm_mhz_median']:.0f} MHz (lowest {c['sm_mhz_min']}), power up to "
                          f"{c['power_w_max']:.0f} W, {c['samples']} samples") if c["samples"] else c.get("error", "no samples")
                    print(f"  the same for about a second: {sustained:7.3f} ms; {at}")
            q = torch.randn(batch, heads, seq, dim, dtype=torch.bfloat16, device="cuda")
            k = torch.randn(batch, kv_heads, seq, dim, dtype=torch.bfloat16, device="cuda")
            v = torch.randn(batch, kv_heads, seq, value_dim, dtype=torch.bfloat16, device="cuda")
            sdpa_mask = (pad > 0).cuda()[:, None, None, :] if mask else None
            if mask == "padding_additive":  # finfo.min past each row's length, as transformers adds it
                sdpa_mask = ((1.0 - pad) * torch.finfo(torch.bfloat16).min).cuda()[:, None, None, :]
            sdpa = torch.nn.functional.scaled_dot_product_attention
            ms = cuda_ms(functools.partial(sdpa, q, k, v, attn_mask=sdpa_mask, is_causal=causal,
                                           enable_gqa=heads != kv_heads))
            print(f"  torch sdpa:            {ms:7.3f} ms {flops / ms / 1e9:6.1f} TFLOP/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
