"""Programmatic dependent launch in rendered kernels (lowering/backends/cuda/render.py): every sm_90+ kernel waits
for its predecessor before its first load; a kernel of a bucket of at most EARLY_LAUNCH_ROWS rows then lets its
successor launch; products of at most PREFETCH_ROWS rows fetch their weight into L2 before the wait, and only a
weight (no kernel writes it) stored [N, K]."""

from __future__ import annotations

import dataclasses

import sympy
from aotpack.lowering.backends.cuda.render import EARLY_LAUNCH_ROWS, PREFETCH_ROWS, render_triton_library
from aotpack.lowering.ir.kernels import Buffer, PointwiseKernel, StridedView
from aotpack.lowering.ir.scalar import Load
from aotpack.lowering.ir.symbolic import index_var, size_symbol
from test_triton_buckets import _linear

ONE = sympy.Integer(1)


def _variants(program, archs, step=0):
    """(bucket top, kernel body) of each variant of a step, then of its whole-range kernel (top None)."""
    library = render_triton_library(program, archs)
    for k in library.kernels:  # what the package records of each (aotpack inspect shows it)
        assert (k.early_launch, k.l2_prefetch) == ("_launch_dependents()" in k.source, "_l2_prefetch(in" in k.source)
    kernels = {k.name: k.source for k in library.kernels}
    whole = kernels[library.step_kernels[step]]
    found = library.variants_of(step)
    variants = [(v.upto, kernels[v.kernel]) for v in found.variants] if found else []
    return [(upto, source[source.index("def t_"):]) for upto, source in [*variants, (None, whole)]]


def _opening(body: str) -> list[str]:
    return [line.strip() for line in body.split("\n")[1:3]]


def test_few_row_products_fetch_their_weight_then_wait_then_let_the_next_kernel_launch():
    assert (PREFETCH_ROWS, EARLY_LAUNCH_ROWS) == (16, 128)
    buckets = _variants(_linear(size_symbol("s"), 2304, 768, "bfloat16", 2048), (90,))
    assert [upto for upto, _ in buckets] == [16, 128, 512, None]
    few, mid, many = buckets[0][1], buckets[1][1], buckets[2][1]
    # nn.Linear's weight is read transposed, k contiguous: a fetch every 64 bf16 values (a 128-byte line)
    assert "_l2_prefetch(in1 + " in few and "* 64, K - 1)" in few
    assert few.index("_l2_prefetch(") < few.index("tl.extra.cuda.gdc_wait()") < few.index("_launch_dependents()")
    assert few.index("_launch_dependents()") < few.index("tl.load(")
    assert "_l2_prefetch(" not in mid and _opening(mid) == ["tl.extra.cuda.gdc_wait()", "_launch_dependents()"]
    assert "_l2_prefetch(" not in many and "_launch_dependents()" not in many
    assert _opening(many)[0] == "tl.extra.cuda.gdc_wait()"


def test_with_prefetch_rows_raised_only_the_first_row_tile_of_a_bucket_fetches(monkeypatch, tmp_path):
    """PREFETCH_ROWS raised past a bucket's row tile (scripts/pdl_bench.py's `prefetch128`): the bucket of 17-128
    rows fetches too, from its first tile of rows' programs alone, so that each column is fetched once; the
    one-tile bucket's fetch stays unconditional, and the kernels compile for sm_90."""
    from aotpack.lowering.backends.cuda import render

    monkeypatch.setattr(render, "PREFETCH_ROWS", 128)
    program = _linear(size_symbol("s"), 2304, 768, "bfloat16", 2048)
    buckets = _variants(program, (90,))
    few, mid, many = buckets[0][1], buckets[1][1], buckets[2][1]
    assert "_l2_prefetch(in1 + " in few and "if pid_m == 0:" not in few
    assert "if pid_m == 0:" in mid and "_l2_prefetch(in1 + " in mid
    assert mid.index("if pid_m == 0:") < mid.index("_l2_prefetch(") < mid.index("tl.extra.cuda.gdc_wait()")
    assert "_l2_prefetch(" not in many
    from aotpack.lowering.backends.cuda.compile import compile_triton_library

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    library = render_triton_library(program, (90,))
    compiled = compile_triton_library(library, (90,))[90].kernels
    assert all(c.cubin[:4] == b"\x7fELF" for c in compiled.values()) and len(compiled) == len(library.kernels)


def test_a_weight_stored_k_major_is_not_fetched_early():
    program = _linear(size_symbol("s"), 2304, 768, "bfloat16", 2048)
    w = Buffer("w", "bfloat16", (sympy.Integer(768), sympy.Integer(2304)), "weight", "w")  # Conv1D: [K, N]
    program = dataclasses.replace(program, buffers={**program.buffers, "w": w}, steps=(dataclasses.replace(
        program.steps[0], b=StridedView("w", sympy.Integer(0), (sympy.Integer(0), sympy.Integer(2304), ONE))),))
    few = _variants(program, (90,))[0][1]
    assert "_l2_prefetch(" not in few and _opening(few) == ["tl.extra.cuda.gdc_wait()", "_launch_dependents()"]


def test_no_fetch_of_an_activation_nor_any_wait_before_sm_90():
    program = _linear(size_symbol("s"), 2304, 768, "bfloat16", 2048)
    w = dataclasses.replace(program.buffers["w"], kind="input", source="w")
    activation = dataclasses.replace(program, buffers={**program.buffers, "w": w}, inputs=("x", "w"))
    few = _variants(activation, (90,))[0][1]
    assert "_l2_prefetch(" not in few and "gdc_wait()" in few
    for _, body in _variants(program, (80, 90)):
        assert "gdc_wait" not in body and "_l2_prefetch(" not in body and "_launch_dependents" not in body


def test_other_kernels_get_a_variant_that_launches_its_successor_early_for_few_rows():
    """A pointwise kernel's source does not depend on its rows but for that signal: with PDL it gets one variant
    for the buckets up to EARLY_LAUNCH_ROWS rows (signalling) and its whole-range kernel (not)."""
    s = size_symbol("s")
    program = _linear(s, 64, 64, "bfloat16", 2048)
    x = program.buffers["x"]
    out = dataclasses.replace(program.buffers["out"], shape=x.shape)
    step = PointwiseKernel("out", x.shape, Load("x", index_var("i", 0) * 64 + index_var("i", 1), "bfloat16"))
    program = dataclasses.replace(program, buffers={**program.buffers, "out": out}, steps=(step,))
    buckets = _variants(program, (90,))
    assert [upto for upto, _ in buckets] == [128, None]
    assert "_launch_dependents()" in buckets[0][1] and "_launch_dependents()" not in buckets[1][1]
    assert [upto for upto, _ in _variants(program, (80,))] == [None]  # no PDL: one kernel for every size


RUN_FEW_ROW_NORM = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1]]
from triton_interp import run_program
from test_golden import CASES
from aotpack.lowering.backends.cuda.render import render_triton_library
program = CASES["row_layer_norm_gathered"]
torch.manual_seed(0)
program.weights["w2"] = torch.randn(4, 8).to(torch.float16)
bucketed, whole = render_triton_library(program, (90,)), render_triton_library(program)
few = bucketed.variants_of(0).variants[0]
kernels = {k.name: k for k in bucketed.kernels}
report = {"few": [few.upto, dict(kernels[few.kernel].constexprs)["XBLOCK"], kernels[few.kernel].num_warps]}
for rows in (1, 3, 16, 17, 40):
    ids = torch.randint(0, 4, (rows,))
    got, errors = run_program(program, bucketed, [ids])
    ref, _ = run_program(program, whole, [ids])
    report[rows] = [errors, float((got[0].float() - ref[0].float()).abs().max()), float(ref[0].float().abs().max())]
print(json.dumps(report))
"""


def test_few_row_row_kernels_hold_a_row_a_program_with_the_same_results():
    """With PDL a row kernel's buckets of at most ROW_PER_PROGRAM_ROWS rows hold one row a program (one warp for
    a row this short); its results equal the four-rows-a-program kernel's, inside and past that bucket, on the
    gathered layer norm's golden program in the Triton interpreter."""
    from triton_interp import run_in_interpreter

    report = run_in_interpreter(RUN_FEW_ROW_NORM)
    assert report.pop("few") == [16, 1, 1]
    for rows, (errors, worst, scale) in report.items():
        assert errors == [] and scale > 0.5 and worst <= 1e-3 * scale, f"{rows} rows: {errors} {worst} {scale}"
