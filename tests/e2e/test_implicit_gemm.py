"""Convolution as implicit GEMM: the matmul evaluates the columns (a GatheredOperand) while it packs or loads
its tiles, through the C++ runtime. tests/codegen/test_triton_conv.py runs the same models' Triton kernels.

Besides the convolutions themselves (the columns split into a per-row and a per-column offset), every matmul
operand is also rewritten into an expression the kernels cannot split, the weight included, so the
element-by-element path of both operands is checked too.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import sympy
import torch
from aotpack.build import build_package
from aotpack.exporter import ModelSpec, capture, resolve_symbols, with_dtype
from aotpack.lowering.decompositions import decompositions
from aotpack.lowering.graph import GraphLowering
from aotpack.lowering.ir import GatheredOperand, MatmulKernel, Program, operand_vars, split_gather
from aotpack.lowering.scalar import Load, Op
from aotpack.verification import as_reference, from_runtime, judge, to_numpy
from torch import nn

HERE = Path(__file__).resolve()


class Convs(nn.Module):
    """Stride, padding and dilation unequal per dim, groups, bias; a 1x1 convolution of a lazy input;
    conv1d."""

    def __init__(self) -> None:
        super().__init__()
        self.c2 = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(2, 1), dilation=(2, 3), groups=2)
        self.pointwise = nn.Conv2d(6, 5, 1)
        self.c1 = nn.Conv1d(4, 3, 3, stride=2, padding=1, dilation=2, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pointwise(torch.relu(self.c2(x))), self.c1(y)


def convs_spec(dtype: torch.dtype | None = None) -> ModelSpec:
    torch.manual_seed(0)
    spec = ModelSpec(HERE, Convs().eval(), (torch.randn(2, 4, 9, 10), torch.randn(2, 4, 13)), ("x", "y"),
                     {"x": {0: "batch", 3: "width"}, "y": {0: "batch"}}, {"batch": (1, 4), "width": (6, 20)})
    return with_dtype(spec, dtype) if dtype is not None else spec


def convs_inputs(batch: int, width: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(batch * 100 + width)
    x, y = torch.randn(batch, 4, 9, width, generator=gen), torch.randn(batch, 4, 13, generator=gen)
    return [x.to(dtype), y.to(dtype)]


def lower(spec: ModelSpec) -> Program:
    plan = resolve_symbols(spec)
    return GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run()


def assert_implicit(program: Program) -> None:
    """Every convolution's columns are gathered by its matmul, split into row and column offsets."""
    matmuls = [s for s in program.steps if isinstance(s, MatmulKernel)]
    assert len(matmuls) == 3
    _, k_var, _ = operand_vars()
    assert all(isinstance(s.b, GatheredOperand) and split_gather(s.b, k_var) is not None for s in matmuls)
    assert all(len(b.shape) <= 4 for b in program.buffers.values()), "a [groups, taps, n, oh, ow] column buffer"


def unsplittable_operands(program: Program) -> Program:
    """Every matmul operand as neg(neg(x)) of its elements: an expression no kernel splits, the weight
    gathered too."""
    g = operand_vars()

    def expression(operand):
        if isinstance(operand, GatheredOperand):
            value = operand.value
        else:
            offset = operand.offset + sum(v * s for v, s in zip(g, operand.strides))
            value = Load(operand.buffer, sympy.expand(offset), program.buffers[operand.buffer].dtype)
        return GatheredOperand(Op("neg", (Op("neg", (value,), value.dtype),), value.dtype))

    steps = tuple(dataclasses.replace(s, a=expression(s.a), b=expression(s.b)) if isinstance(s, MatmulKernel)
                  else s for s in program.steps)
    return dataclasses.replace(program, steps=steps)


def _check(result, model: nn.Module, rt, dtype: torch.dtype) -> None:
    """Against float32 on the same (rounded) weights and inputs, with the model in `dtype` as the noise floor."""
    session = rt.Model(result.path).session(num_threads=2)
    reference = copy.deepcopy(model).float()
    for batch, width in ((1, 6), (3, 20), (4, 11)):
        inputs = convs_inputs(batch, width, dtype)
        with torch.no_grad():
            expected = reference(*[x.float() for x in inputs])
            half = model(*inputs) if dtype != torch.float32 else [None, None]
        outputs = session.run([to_numpy(x) for x in inputs])
        for name, out, ref, h in zip(("conv2d", "conv1d"), outputs, expected, half):
            j = judge(name, str(dtype).removeprefix("torch."), from_runtime(out, dtype), as_reference(ref),
                      as_reference(h) if h is not None else None)
            assert j.passed, j.explain()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_convolutions_run_as_implicit_gemm(dtype, tmp_path, rt):
    spec = convs_spec(None if dtype == torch.float32 else dtype)
    assert_implicit(lower(spec))
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    result = build_package(captured, tmp_path / "c.aotpack")
    _check(result, spec.model, rt, dtype)


def test_unsplittable_gathered_operands_on_both_sides(tmp_path, rt, monkeypatch):
    run = GraphLowering.run
    monkeypatch.setattr(GraphLowering, "run", lambda self: unsplittable_operands(run(self)))
    spec = convs_spec()
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    result = build_package(captured, tmp_path / "c.aotpack")
    source = (tmp_path / "c.aotpack").read_bytes()
    assert b"6-row panels evaluated here from a's expression" in source
    _check(result, spec.model, rt, torch.float32)
