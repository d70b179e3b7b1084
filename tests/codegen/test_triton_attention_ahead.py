"""Attention's look-ahead over whole key blocks (templates/triton/attention.py.jinja, AttentionConfig.ahead): the
next block's scores are asked for before this block's softmax. It is the same arithmetic in another order, so in
Triton's interpreter every output is identical bit for bit to the plain loop's, and both match eager sdpa, for
every mask the kernel folds: causal, padding (boolean, additive, with key blocks skipped, rows with no live key),
an additive [seq, seq] mask, grouped-query heads, and runs of 0, 1 and several whole key blocks."""

from __future__ import annotations

from triton_interp import run_in_interpreter

RUN = r"""
import json, sys, torch
from pathlib import Path
sys.path[:0] = [sys.argv[1], str(Path(sys.argv[1]).parent / "e2e")]
from triton_interp import run_program
from test_attention import CASES, SelfAttention, _dead_block_pad, _pad
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.attention_config import AttentionConfig
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.stages import lower
from aotpack.verification import relative_error


def outputs(case, seq, pad):
    heads, kv_heads, dim, value_dim, causal, mask, scale = CASES[case]
    torch.manual_seed(0)
    model = SelfAttention(heads, kv_heads, dim, value_dim, causal, mask, scale).eval()
    x = torch.randn(pad.shape[0], seq, 16)
    spec = ModelSpec(Path("attention.py"), model, (torch.randn(2, 8, 16), _pad(2, 8)), ("x", "pad"),
                     {"x": {0: "batch", 1: "seq"}, "pad": {0: "batch", 1: "seq"}}, {"batch": (1, 8), "seq": (1, 256)})
    plan = resolve_symbols(spec)
    program = lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))
    with torch.no_grad():
        expected = model(x, pad)
    results = {}
    for ahead in (0, 1):
        # 16 query rows and keys per block: 70 keys are 4 whole blocks and an edge block
        render.attention_config = lambda *args: AttentionConfig(16, 16, 4, 2, ahead=ahead)
        library = render.render_triton_library(program)
        (out,), errors = run_program(program, library, [x, pad])
        results[ahead] = (out, errors, dict(next(k for k in library.kernels if "BDV" in dict(k.constexprs)).constexprs))
    (plain, plain_errors, _), (ahead, errors, constexprs) = results[0], results[1]
    return {"same": bool(torch.equal(plain, ahead)), "errors": plain_errors + errors, "ahead": constexprs["AHEAD"],
            "finite": bool(torch.isfinite(ahead).all()), "nonzero": float(ahead.abs().max()),
            "rel": relative_error(ahead.numpy(), expected.numpy())}


report = {}
for case in ("causal", "padding_bool", "padding_additive", "causal_and_mask", "gqa_causal_dim80", "additive_2d_scale",
             "all_masked_rows"):
    for seq in (70, 16, 5):
        report[f"{case} {seq}"] = outputs(case, seq, _pad(3, seq))
report["dead key blocks"] = outputs("padding_bool", 150, _dead_block_pad(150))
print(json.dumps(report))
"""


def test_looking_ahead_gives_the_plain_loops_result_bit_for_bit():
    report = run_in_interpreter(RUN)
    assert len(report) == 22, report
    for point, run in report.items():
        assert run["ahead"] == 1 and not run["errors"], (point, run)
        assert run["same"] and run["finite"] and run["nonzero"] > 0, (point, run)
        assert run["rel"] < 1e-5, (point, run)
