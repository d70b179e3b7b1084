"""Rendered kernel sources against golden files, so a refactor can prove it changed no kernel.

The programs are built by hand from the IR (no torch.export involved), so the goldens depend only on
the lowering's code generation and the templates. After an intended change, regenerate them with
AOTPACK_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sympy
from aotpack.lowering.backends.cpu.render import CppRenderer, render_cpp_library
from aotpack.lowering.ir.kernels import (
    AttentionKernel,
    Buffer,
    GatheredOperand,
    MatmulKernel,
    PointwiseKernel,
    Program,
    ReductionKernel,
    RowKernel,
    RowReduction,
    ScatterKernel,
    StridedView,
    Symbol,
    epilogue_vars,
    operand_vars,
    paired_value,
    product_value,
    row_result,
)
from aotpack.lowering.ir.scalar import Const, IndexValue, Indirect, Load, Op
from aotpack.lowering.ir.symbolic import index_var, size_symbol
from torch.utils._sympy.functions import FloorDiv, ModularIndexing, PythonMod

GOLDEN = Path(__file__).resolve().parent / "golden"
n = size_symbol("n")
i0, i1, r0 = index_var("i", 0), index_var("i", 1), index_var("r", 0)
u0, u1, x0 = index_var("u", 0), index_var("u", 1), sympy.Symbol("x0", integer=True)
_, e1, e2 = epilogue_vars()
_, _G1, _G2 = operand_vars()


def _program(steps, buffers) -> Program:
    return Program(symbols=(Symbol("n", 1, 64),), buffers={b.name: b for b in buffers}, steps=tuple(steps),
                   inputs=("x",), outputs=(steps[-1].output,))


X = Buffer("x", "float32", (n, sympy.Integer(8)), "input", "x")
W = Buffer("w", "float32", (sympy.Integer(8),), "weight", "w")
OUT = Buffer("out", "float32", (n, sympy.Integer(8)), "output", "output")

# a row of the gathered table w2[x[i0]], element r0, and its deviation from the row's mean (for the row case)
_ROW_X = Op("cast", (Load("w2", 8 * x0 + r0, "float16", (Indirect(x0, Load("x", i0, "int64"), sympy.Integer(4), False,
                                                                 "embedding at model.py:3: an index is outside 0..3"),)),),
            "float32")
_ROW_D = Op("sub", (_ROW_X, Op("cast", (row_result("mean", "float16"),), "float32")), "float32")

CASES = {
    "pointwise_broadcast_fused": _program(
        [PointwiseKernel("out", (n, sympy.Integer(8)), Op("exp", (Op("add", (
            Load("x", 8 * i0 + i1, "float32"), Load("w", i1, "float32")), "float32"),), "float32"))],
        [X, W, OUT]),
    "pointwise_bf16_cast": _program(
        [PointwiseKernel("out", (n, sympy.Integer(8)), Op("mul", (Load("x", 8 * i0 + i1, "bfloat16"),
                                                                   Const(0.5, "float32")), "float32"))],
        [Buffer("x", "bfloat16", X.shape, "input", "x"), Buffer("out", "bfloat16", OUT.shape, "output", "output")]),
    "reduction_sum_last_dim": _program(
        [ReductionKernel("out", (n,), (sympy.Integer(8),), Load("x", 8 * i0 + r0, "float32"), "sum", "float32", "float32")],
        [X, Buffer("out", "float32", (n,), "output", "output")]),
    "reduction_argmax": _program(
        [ReductionKernel("out", (sympy.Integer(8),), (n,), Load("x", 8 * r0 + i0, "float32"), "argmax", "float32", "int64")],
        [X, Buffer("out", "int64", (sympy.Integer(8),), "output", "output")]),
    "gather_checked_index": _program(
        [PointwiseKernel("out", (n, sympy.Integer(8)), Load("w2", 8 * sympy.Symbol("x0", integer=True) + i1, "float32",
                         (Indirect(sympy.Symbol("x0", integer=True), Load("x", i0, "int64"), sympy.Integer(4), False,
                                   "embedding at model.py:3: an index is outside 0..3"),)))],
        [Buffer("x", "int64", (n,), "input", "x"), Buffer("w2", "float32", (4, 8), "weight", "w2"), OUT]),
    # out[idx[u0, u1], u1] += x[u0, u1], the index checked against out's n rows (scatter_add)
    "scatter_add_checked_index": _program(
        [ScatterKernel("out", (n, sympy.Integer(8)), Load("out", 8 * x0 + u1, "float32", (Indirect(
            x0, Load("idx", 8 * u0 + u1, "int64"), n, False, "scatter_add at model.py:3: an index is outside the dimension"),)),
            Load("x", 8 * u0 + u1, "float32"), "sum")],
        [X, Buffer("idx", "int64", (n, sympy.Integer(8)), "input", "idx"), OUT]),
    # out[u0, idx[u0]] = 2.0 for each of n rows (index_fill), negative indices counted from the end
    "scatter_assign_wrapped_index": _program(
        [ScatterKernel("out", (n,), Load("out", 8 * u0 + x0, "float32", (Indirect(
            x0, Load("idx", u0, "int64"), sympy.Integer(8), True, "index_put at model.py:3: an index is outside the dimension"),)),
            Const(2.0, "float32"), "assign")],
        [X, Buffer("idx", "int64", (n,), "input", "idx"), OUT]),
    # causal attention whose mask keeps a padding term (what a causal mask built from positions and-ed with
    # a padding row lowers to): q, k, v are column slices of one [n, 48] input, 2 heads of dim 8
    "attention_causal_padding": _program(
        [AttentionKernel("out", *(StridedView("x", sympy.Integer(16 * part), (48 * n, sympy.Integer(8), sympy.Integer(48),
                                                                                sympy.Integer(1))) for part in range(3)),
                         sympy.Integer(1), sympy.Integer(2), sympy.Integer(2), n, n, sympy.Integer(8), sympy.Integer(8),
                         0.35, True, Op("where", (Op("gt", (Load("pad", index_var("i", 3), "float32"),
                                                            Const(0.0, "float32")), "bool"),
                                                  Const(0.0, "float32"), Const(float("-inf"), "float32")), "float32"),
                         "float32")],
        [Buffer("x", "float32", (n, sympy.Integer(48)), "input", "x"), Buffer("pad", "float32", (n,), "input", "pad"),
         Buffer("out", "float32", (sympy.Integer(1), n, sympy.Integer(2), sympy.Integer(8)), "output", "output")]),
    # attention under an additive padding mask of the key alone (transformers' finfo.min past each length): the
    # Triton kernel scans for the key blocks the mask leaves a score in and walks only those
    "attention_padding": _program(
        [AttentionKernel("out", *(StridedView("x", sympy.Integer(16 * part), (48 * n, sympy.Integer(8), sympy.Integer(48),
                                                                                sympy.Integer(1))) for part in range(3)),
                         sympy.Integer(1), sympy.Integer(2), sympy.Integer(2), n, n, sympy.Integer(8), sympy.Integer(8),
                         0.35, False, Load("pad", index_var("i", 3), "float32"), "float32")],
        [Buffer("x", "float32", (n, sympy.Integer(48)), "input", "x"), Buffer("pad", "float32", (n,), "input", "pad"),
         Buffer("out", "float32", (sympy.Integer(1), n, sympy.Integer(2), sympy.Integer(8)), "output", "output")]),
    # causal attention with its diagonal at j <= i + n: n queries after n keys of a memory (keys 2n long), no mask
    "attention_causal_diagonal": _program(
        [AttentionKernel("out", StridedView("x", sympy.Integer(0), (16 * n, sympy.Integer(8), sympy.Integer(16),
                                                                    sympy.Integer(1))),
                         *(StridedView("kv", sympy.Integer(16 * part), (64 * n, sympy.Integer(8), sympy.Integer(32),
                                                                        sympy.Integer(1))) for part in range(2)),
                         sympy.Integer(1), sympy.Integer(2), sympy.Integer(2), n, 2 * n, sympy.Integer(8),
                         sympy.Integer(8), 0.35, True, None, "float32", causal_offset=n)],
        [Buffer("x", "float32", (n, sympy.Integer(16)), "input", "x"),
         Buffer("kv", "float32", (2 * n, sympy.Integer(32)), "input", "kv"),
         Buffer("out", "float32", (sympy.Integer(1), n, sympy.Integer(2), sympy.Integer(8)), "output", "output")]),
    # layer norm of rows gathered from an fp16 table (idx checked), in one row kernel (ir/row_fusion.py):
    # the mean rounded to fp16 as the unfused program stored it, the variance reading it, then the
    # normalising pass; neither result is stored
    "row_layer_norm_gathered": _program(
        [RowKernel("out", (n,), (sympy.Integer(8),), (
            RowReduction("mean", Op("div", (_ROW_X, Const(8.0, "float32")), "float32"), "sum", "float32", "float16"),
            RowReduction("var", Op("mul", (_ROW_D, _ROW_D), "float32"), "sum", "float32", "float32")),
            Op("mul", (_ROW_D, Op("rsqrt", (Op("add", (Op("div", (row_result("var", "float32"), Const(8.0, "float32")),
                                                           "float32"), Const(1e-5, "float32")), "float32"),), "float32")),
               "float32"))],
        [Buffer("x", "int64", (n,), "input", "x"), Buffer("w2", "float16", (4, 8), "weight", "w2"),
         Buffer("out", "float16", (n, sympy.Integer(8)), "output", "output")]),
    "matmul_transposed_b": _program(
        [MatmulKernel("out", StridedView("x", sympy.Integer(0), (sympy.Integer(0), sympy.Integer(8), sympy.Integer(1))),
                      StridedView("w2", sympy.Integer(0), (sympy.Integer(0), sympy.Integer(1), sympy.Integer(8))),
                      sympy.Integer(1), n, sympy.Integer(4), sympy.Integer(8), "float32")],
        [X, Buffer("w2", "float32", (4, 8), "weight", "w2"), Buffer("out", "float32", (n, 4), "output", "output")]),
    # relu(x @ w2^T + bias) + x[:, :4] in bf16, the epilogue fused into the product (ir/epilogue.py)
    "matmul_bf16_epilogue": _program(
        [MatmulKernel("out", StridedView("x", sympy.Integer(0), (sympy.Integer(0), sympy.Integer(8), sympy.Integer(1))),
                      StridedView("w2", sympy.Integer(0), (sympy.Integer(0), sympy.Integer(1), sympy.Integer(8))),
                      sympy.Integer(1), n, sympy.Integer(4), sympy.Integer(8), "bfloat16",
                      Op("add", (Op("relu", (Op("add", (product_value("bfloat16"), Load("bias", e2, "bfloat16")),
                                                "float32"),), "float32"), Load("x", 8 * e1 + e2, "bfloat16")),
                         "float32"))],
        [Buffer("x", "bfloat16", X.shape, "input", "x"), Buffer("w2", "bfloat16", (4, 8), "weight", "w2"),
         Buffer("bias", "bfloat16", (4,), "weight", "bias"), Buffer("out", "bfloat16", (n, 4), "output", "output")]),
    # silu(x @ wg^T) * (x @ wu^T) in bf16: a gated MLP's two products paired (ir/paired_products.py), their
    # [4, 8] weights interleaved row by row into w2 ([8, 8]: up's row j at 2j, the gate's at 2j + 1)
    "matmul_bf16_paired": _program(
        [MatmulKernel("out", StridedView("x", sympy.Integer(0), (sympy.Integer(0), sympy.Integer(8), sympy.Integer(1))),
                      StridedView("w2", sympy.Integer(0), (sympy.Integer(0), sympy.Integer(1), sympy.Integer(8))),
                      sympy.Integer(1), n, sympy.Integer(8), sympy.Integer(8), "bfloat16",
                      Op("mul", (Op("mul", (paired_value("bfloat16"), Op("sigmoid", (paired_value("bfloat16"),),
                                                                             "float32")), "float32"),
                                 product_value("bfloat16")), "float32"), paired=True)],
        [Buffer("x", "bfloat16", X.shape, "input", "x"), Buffer("w2", "bfloat16", (8, 8), "weight", "w2"),
         Buffer("out", "bfloat16", (n, 4), "output", "output")]),
    # a 3x3 convolution (4 channels in, 6 out) of a zero-padded [2, 4, n + 2, 10] image, as implicit GEMM: b's
    # column g2 is output pixel (image, row, col) of an [2, n, 8] output, its row g1 a (channel, dy, dx) tap;
    # the column's divisions by the image's sizes are counted per tile (codegen/counters.py)
    "matmul_conv_columns": _program(
        [MatmulKernel("out", StridedView("w2", sympy.Integer(0), (sympy.Integer(0), sympy.Integer(36), sympy.Integer(1))),
                      GatheredOperand(Load("x", 4 * 10 * (n + 2) * FloorDiv(_G2, 8 * n) + 10 * ModularIndexing(_G2, 8, n)
                                           + PythonMod(_G2, 8) + 10 * (n + 2) * FloorDiv(_G1, 9)
                                           + 10 * ModularIndexing(_G1, 3, 3) + PythonMod(_G1, 3), "float32")),
                      sympy.Integer(1), sympy.Integer(6), 16 * n, sympy.Integer(36), "float32")],
        [Buffer("x", "float32", (2, 4, n + 2, 10), "input", "x"), Buffer("w2", "float32", (6, 36), "weight", "w2"),
         Buffer("out", "float32", (6, 16 * n), "output", "output")]),
    # a 2x2 max pool of [n, 8] rows: the four loads of a window share one offset computed before the row's
    # loop, so g++ reads each pair of neighbours as one interleaved group (codegen/body.py)
    "pointwise_pool_pairs": _program(
        [PointwiseKernel("out", (FloorDiv(n, 2), sympy.Integer(4)), Op("maximum", (
            Op("maximum", (Load("x", 16 * i0 + 2 * i1, "float32"), Load("x", 16 * i0 + 2 * i1 + 1, "float32")), "float32"),
            Op("maximum", (Load("x", 16 * i0 + 2 * i1 + 8, "float32"), Load("x", 16 * i0 + 2 * i1 + 9, "float32")),
               "float32")), "float32"))],
        [X, Buffer("out", "float32", (FloorDiv(n, 2), sympy.Integer(4)), "output", "output")]),
    # x's rows padded by 1 on each side with 0, scaled by exp(w[0]): between the borders a body without the
    # tests and the clamp (codegen/peeling.py); the scale computed once before each row's loops
    "pointwise_pad_peeled": _program(
        [PointwiseKernel("out", (n, sympy.Integer(10)), Op("mul", (Op("where", (
            Op("logical_and", (Op("ge", (IndexValue(i1 - 1, "int64"), Const(0, "int64")), "bool"),
                               Op("lt", (IndexValue(i1 - 1, "int64"), Const(8, "int64")), "bool")), "bool"),
            Load("x", 8 * i0 + sympy.Max(0, sympy.Min(i1 - 1, 7)), "float32"), Const(0.0, "float32")), "float32"),
            Op("exp", (Load("w", sympy.Integer(0), "float32"),), "float32")), "float32"))],
        [X, W, Buffer("out", "float32", (n, sympy.Integer(10)), "output", "output")]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_kernel_matches_golden(case):
    program = CASES[case]
    source = CppRenderer(program).render(program.steps[0])[0].source
    golden = GOLDEN / f"{case}.cpp"
    if os.environ.get("AOTPACK_UPDATE_GOLDEN"):
        golden.write_text(source)
    assert golden.exists(), f"no golden file {golden.name}; create it with AOTPACK_UPDATE_GOLDEN=1"
    assert source == golden.read_text(), f"{case}: the rendered kernel changed; review, then AOTPACK_UPDATE_GOLDEN=1"


def test_every_generated_file_says_where_it_came_from():
    source = render_cpp_library(CASES["pointwise_broadcast_fused"]).source
    assert source.startswith("// Generated by aotpack from templates/cpp/prelude.h.jinja. Do not edit.")
    assert "// Generated by aotpack from templates/cpp/pointwise.cpp.jinja. Do not edit." in source


def test_identical_kernels_are_generated_once():
    step = CASES["pointwise_broadcast_fused"].steps[0]
    program = _program([step, PointwiseKernel("out", step.shape, step.value)], [X, W, OUT])
    library = render_cpp_library(program)
    assert len(library.kernels) == 1 and library.step_kernels[0] == library.step_kernels[1]
