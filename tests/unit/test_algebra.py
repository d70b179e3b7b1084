"""ir/algebra.py: 0.5 * x * (1 + tanh(y)) becomes x * sigmoid(2 y), in every operand order, and nothing else
changes (the e2e op tests compare the rewritten tanh GELU against eager on CPU and GPU)."""

from __future__ import annotations

import torch
from aotpack.lowering.ir.algebra import simplify, simplify_values
from aotpack.lowering.ir.kernels import PointwiseKernel
from aotpack.lowering.ir.scalar import Const, IndexValue, Node, Op
from test_epilogue import lowered  # tests/unit/test_epilogue.py: a model captured and walked to kernel IR
from torch import nn


def op_names(node: Node) -> list[str]:
    if not isinstance(node, Op):
        return []
    return [node.name, *(name for a in node.args for name in op_names(a))]


class TanhGelu(nn.Module):
    def forward(self, x):
        return nn.functional.gelu(x, approximate="tanh") + torch.tanh(x)


def test_the_tanh_gelu_of_a_model_becomes_a_sigmoid_and_a_plain_tanh_stays():
    program = lowered(TanhGelu(), torch.randn(4, 8))
    before = [name for s in program.steps if isinstance(s, PointwiseKernel) for name in op_names(s.value)]
    after = [name for s in simplify_values(program).steps if isinstance(s, PointwiseKernel) for name in op_names(s.value)]
    assert before.count("tanh") == 2 and "sigmoid" not in before, before
    assert after.count("tanh") == 1 and after.count("sigmoid") == 1, after  # torch.tanh(x) itself stays


X = IndexValue(1, "float32")  # stand-ins for two different subexpressions
Y = Op("neg", (IndexValue(2, "float32"),), "float32")


def _mul(a: Node, b: Node) -> Op:
    return Op("mul", (a, b), "float32")


def _one_plus_tanh(first_one: bool) -> Op:
    tanh = Op("tanh", (Y,), "float32")
    one = Const(1.0, "float32")
    return Op("add", (one, tanh) if first_one else (tanh, one), "float32")


def test_every_operand_order_rewrites_to_x_times_sigmoid_of_2y():
    half = Const(0.5, "float32")
    sigmoid = Op("sigmoid", (_mul(Y, Const(2.0, "float32")),), "float32")
    for first_one in (True, False):
        plus = _one_plus_tanh(first_one)
        for scaled in (_mul(half, X), _mul(X, half)):
            assert simplify(_mul(scaled, plus)) == _mul(X, sigmoid)
            assert simplify(_mul(plus, scaled)) == _mul(X, sigmoid)
        assert simplify(_mul(half, plus)) == sigmoid
        assert simplify(_mul(plus, half)) == sigmoid


def test_a_constant_factor_of_y_is_doubled_instead_of_a_multiply_added():
    scaled_y = _mul(X, Const(0.7978845608028654, "float32"))
    plus = Op("add", (Op("tanh", (scaled_y,), "float32"), Const(1.0, "float32")), "float32")
    doubled = Op("sigmoid", (_mul(X, Const(1.5957691216057308, "float32")),), "float32")
    assert simplify(_mul(Const(0.5, "float32"), plus)) == doubled


def test_other_forms_are_left_alone():
    plus = _one_plus_tanh(False)
    for node in (_mul(_mul(X, Const(0.25, "float32")), plus),  # not a half
                 _mul(_mul(X, Const(0.5, "float32")), Op("add", (Op("tanh", (Y,), "float32"), Const(2.0, "float32")), "float32")),
                 _mul(X, plus),
                 Op("mul", (Const(0.5, "float64"), Op("add", (Const(1.0, "float64"), Op("tanh", (Y,), "float32")), "float64")),
                    "float64")):  # y of another dtype
        assert simplify(node) == node
