"""Kernel variants per bucket of a deciding size (lowering/ir/buckets.py): the rule, the configurations an
H200 gets for real shapes (a golden table), and results across buckets in Triton's interpreter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sympy
from aotpack.lowering.backends.cuda.render import TritonRenderer
from aotpack.lowering.codegen.printer import to_json
from aotpack.lowering.ir.buckets import bucket_uppers
from aotpack.lowering.ir.kernels import AttentionKernel, Buffer, MatmulKernel, Program, StridedView, Symbol
from aotpack.lowering.ir.symbolic import size_symbol
from triton_interp import run_in_interpreter

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "triton"
ZERO, ONE = sympy.Integer(0), sympy.Integer(1)


def test_bucket_rule_cuts_after_16_128_512_2048_then_every_factor_of_4():
    assert bucket_uppers(1, 2048) == (16, 128, 512, 2048)
    assert bucket_uppers(1, 4096) == (16, 128, 512, 2048, 4096)
    assert bucket_uppers(1, 40000) == (16, 128, 512, 2048, 4096, 8192, 16384, 32768, 40000)
    assert bucket_uppers(1, 64) == (16, 64)
    assert bucket_uppers(100, 600) == (128, 512, 600)  # buckets below the range's start are dropped
    assert bucket_uppers(8, 8) == (8,)


def _linear(rows: sympy.Expr, n: int, k: int, dtype: str, hi: int) -> Program:
    """out[rows, n] = x[rows, k] @ w[n, k]^T, as nn.Linear lowers (the weight read transposed)."""
    x = Buffer("x", dtype, (rows, sympy.Integer(k)), "input", "x")
    w = Buffer("w", dtype, (sympy.Integer(n), sympy.Integer(k)), "weight", "w")
    out = Buffer("out", dtype, (rows, sympy.Integer(n)), "output", "out")
    step = MatmulKernel("out", StridedView("x", ZERO, (ZERO, sympy.Integer(k), ONE)),
                        StridedView("w", ZERO, (ZERO, ONE, sympy.Integer(k))), ONE, rows, sympy.Integer(n),
                        sympy.Integer(k), dtype)
    return Program((Symbol("s", 1, hi),), {b.name: b for b in (x, w, out)}, (step,), ("x",), ("out",))


def _causal_attention(heads: int, dim: int, hi: int) -> Program:
    s = size_symbol("s")
    shape = (ONE, sympy.Integer(heads), s, sympy.Integer(dim))
    strides = (heads * s * dim, s * dim, sympy.Integer(dim), ONE)
    bufs = [Buffer(name, "bfloat16", shape, "input", name) for name in "qkv"]
    bufs.append(Buffer("out", "bfloat16", (ONE, s, sympy.Integer(heads), sympy.Integer(dim)), "output", "out"))
    step = AttentionKernel("out", *(StridedView(name, ZERO, strides) for name in "qkv"), ONE, sympy.Integer(heads),
                           sympy.Integer(heads), s, s, sympy.Integer(dim), sympy.Integer(dim), dim ** -0.5, True,
                           None, "bfloat16")
    return Program((Symbol("s", 1, hi),), {b.name: b for b in bufs}, (step,), ("q", "k", "v"), ("out",))


SHAPES = {
    "gpt2_qkv_bf16": _linear(size_symbol("s"), 2304, 768, "bfloat16", 4096),
    "gpt2_mlp_down_bf16": _linear(size_symbol("s"), 768, 3072, "bfloat16", 4096),
    "gpt2_logits_bf16": _linear(size_symbol("s"), 50257, 768, "bfloat16", 4096),
    "linear_fp32": _linear(size_symbol("s"), 1024, 1024, "float32", 2048),
    "attention_causal_bf16": _causal_attention(12, 64, 2048),
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_bucket_variants_match_golden(case):
    """Each bucket's configuration on an H200 (sm_90); after an intended change to the rule or the table,
    regenerate with AOTPACK_UPDATE_GOLDEN=1 and review the diff."""
    program = SHAPES[case]
    renderer = TritonRenderer(program, 90, tma=True)  # as render_triton_library renders for sm_90 alone
    whole, grid, variants = renderer.render_variants(program.steps[0])
    lines = [f"deciding size: {renderer.deciding_size(program.steps[0])}"]
    for kernel, variant in [*variants, (whole, None)]:
        upto = f"up to {variant.upto}" if variant else "the rest"
        launch = variant.launch if variant else grid
        lines.append(f"{upto}: {kernel.name} {list(kernel.constexprs)} warps {kernel.num_warps} "
                     f"stages {kernel.num_stages}{' persistent TMA' if kernel.persistent else ''} "
                     f"grid {[to_json(g) for g in launch]}")
    text = "\n".join(lines) + "\n"
    path = GOLDEN / f"{case}.variants.txt"
    if os.environ.get("AOTPACK_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with AOTPACK_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"the bucket variants for {case} differ from {path}"
    assert len(variants) >= 1, "a product over 1..4096 rows has more than one configuration"


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1]]
from triton_interp import run_program
from test_triton_buckets import _linear
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.lowering.ir.symbolic import size_symbol
program = _linear(size_symbol("s"), 512, 32, "float32", 600)
library = render_triton_library(program, (80,))
assert library.variants_of(0) is not None, "expected a variant below the top bucket"
report = {"kernels": len(library.kernels)}
torch.manual_seed(0)
w = program.weights["w"] = torch.randn(512, 32)
for rows in (1, 3, 16, 17, 200, 600):
    x = torch.randn(rows, 32)
    outs, errors = run_program(program, library, [x])
    report[rows] = [errors, float((outs[0] - x @ w.T).abs().max())]
print(json.dumps(report))
"""


def test_each_bucket_computes_the_product_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert report.pop("kernels") >= 2
    for rows, (errors, worst) in report.items():
        assert errors == [] and worst < 1e-3, f"{rows} rows: {errors} {worst}"


RUN_DEEP_K = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1]]
from triton_interp import run_program
from test_triton_buckets import _linear
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.lowering.ir.symbolic import size_symbol
program = _linear(size_symbol("s"), 96, 1500, "float16", 600)  # the interpreter has no bfloat16 (numpy)
library = render_triton_library(program, (90,))
few = library.variants_of(0).variants[0]
report = {"few_rows": [few.upto, dict(next(k for k in library.kernels if k.name == few.kernel).constexprs)["BK"]]}
torch.manual_seed(0)
w = program.weights["w"] = torch.randn(96, 1500).to(torch.float16)
for rows in (1, 16, 17):
    x = torch.randn(rows, 1500).to(torch.float16)
    outs, errors = run_program(program, library, [x])
    ref = x.float() @ w.float().T
    report[rows] = [errors, float((outs[0].float() - ref).abs().max() / ref.abs().max())]
print(json.dumps(report))
"""


def test_few_row_products_take_a_deep_k_step_and_mask_its_tail():
    """A half product with few rows whose narrowest tiles still leave the grid short of the GPU's SMs steps
    512 deep through K (matmul_config.py); K = 1500 is not a multiple of it, so the last step is masked."""
    report = run_in_interpreter(RUN_DEEP_K)
    assert report.pop("few_rows") == [16, 512]
    for rows, (errors, worst) in report.items():
        assert errors == [] and worst < 2e-3, f"{rows} rows: {errors} {worst}"
