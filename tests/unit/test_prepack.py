"""The CPU's layout pass (lowering/backends/cpu/prepack.py) on hand-made IR."""

from __future__ import annotations

import sympy
import torch
from aotpack.lowering.backends.cpu.prepack import PANEL, prepack_weights
from aotpack.lowering.ir.kernels import (
    Buffer,
    MatmulKernel,
    PanelView,
    PointwiseKernel,
    Program,
    StridedView,
    Symbol,
)
from aotpack.lowering.ir.scalar import Load
from aotpack.lowering.ir.symbolic import index_var, size_symbol
from aotpack.lowering.ir.verify import verify_program

n = size_symbol("n")
I = sympy.Integer


def _program(extra_reader: bool) -> Program:
    """out = x @ w.T for x [n, 8] and w [20, 8]; with `extra_reader`, a second kernel also reads w."""
    buffers = [Buffer("x", "float32", (n, I(8)), "input", "x"), Buffer("w", "float32", (I(20), I(8)), "weight", "w"),
               Buffer("out", "float32", (n, I(20)), "output", "out")]
    steps = [MatmulKernel("out", StridedView("x", I(0), (I(0), I(8), I(1))), StridedView("w", I(0), (I(0), I(1), I(8))),
                          I(1), n, I(20), I(8), "float32")]
    outputs = ("out",)
    if extra_reader:
        buffers.append(Buffer("copy", "float32", (I(20), I(8)), "output", "copy"))
        i0, i1 = index_var("i", 0), index_var("i", 1)
        steps.append(PointwiseKernel("copy", (I(20), I(8)), Load("w", 8 * i0 + i1, "float32")))
        outputs = ("out", "copy")
    return Program((Symbol("n", 1, 4),), {b.name: b for b in buffers}, tuple(steps), ("x",), outputs,
                   {"w": torch.randn(20, 8)})


def test_a_weight_only_a_matmul_reads_becomes_panels():
    program = _program(extra_reader=False)
    packed = prepack_weights(program)
    verify_program(packed, "prepack_weights")
    b = packed.steps[0].b
    assert isinstance(b, PanelView) and b.width == PANEL and b.k == 8
    assert list(packed.buffers) == ["x", "out", b.buffer]  # w is gone, its panels follow the matmul's buffers
    panels = packed.weights[packed.buffers[b.buffer].source]
    assert set(packed.weights) == {"w.panels16"} and panels.shape == (2, 8, PANEL)
    # element (k, n) of b = w.T at panel n // 16, row k, column n % 16; the padding is zeros
    w = program.weights["w"]
    assert torch.equal(panels[1, :, :4], w[16:].T) and not panels[1, :, 4:].any()


def test_a_weight_other_kernels_read_is_left_as_it_is():
    program = _program(extra_reader=True)
    assert prepack_weights(program) is program
