"""Algebraic rewrites of the kernels' scalar values: an exact identity that computes the same value in fewer or
cheaper operations, applied to every pointwise and reduction value before kernels are compared and fused.

- 0.5 * (1 + tanh(y)) = sigmoid(2 y). The tanh form of GELU (GPT-2's `gelu_new`, F.gelu(approximate="tanh"),
  as torch decomposes it) is 0.5 * x * (1 + tanh(y)); rewritten, it is x * sigmoid(2 y). A sigmoid is cheaper
  than a tanh in both backends (the Triton prelude's `_sigmoid_f32` is 7 instructions an element, libdevice's
  tanhf 23), and it is better conditioned: 1 + tanh(y) for y below about -4 loses most of its digits to
  cancellation, where 1 / (1 + e^(-2y)) keeps them. In a product's epilogue the activation is computed for every
  element of the tile after the k loop, which at K = 768 is most of the kernel's instructions.

The rewritten value is the same real number; its float32 rounding differs from the original by a few ulp,
within what verification allows for any kernel.
"""

from __future__ import annotations

from dataclasses import replace

from .dtypes import is_float
from .kernels import PointwiseKernel, Program, ReductionKernel
from .scalar import Const, Node, Op


def simplify_values(program: Program) -> Program:
    """The program with every pointwise and reduction value rewritten (`simplify`)."""
    steps = tuple(replace(s, value=simplify(s.value)) if isinstance(s, (PointwiseKernel, ReductionKernel)) else s
                  for s in program.steps)
    return replace(program, steps=steps)


def simplify(node: Node) -> Node:
    """`node` with the identities above applied bottom-up. A value is a DAG (GELU reads its argument three
    times), so each shared node is rewritten once."""
    done: dict[int, Node] = {}

    def walk(n: Node) -> Node:
        if not isinstance(n, Op):
            return n
        if id(n) not in done:
            rebuilt = Op(n.name, tuple(walk(a) for a in n.args), n.dtype)
            done[id(n)] = _half_one_plus_tanh(rebuilt) or rebuilt
        return done[id(n)]

    return walk(node)


def _is_const(node: Node, value: float) -> bool:
    return isinstance(node, Const) and node.value == value


def _tanh_of_one_plus(node: Node) -> Node | None:
    """y when `node` is 1 + tanh(y) (either order), else None."""
    if not (isinstance(node, Op) and node.name == "add"):
        return None
    for one, other in (node.args, node.args[::-1]):
        if _is_const(one, 1.0) and isinstance(other, Op) and other.name == "tanh":
            return other.args[0]
    return None


def _doubled(y: Node) -> Node:
    """2 y; for y = z * c (a constant), z * 2c, the same float (doubling is exact and commutes with rounding):
    the tanh GELU's y is already a product by sqrt(2 / pi)."""
    if isinstance(y, Op) and y.name == "mul":
        for z, c in (y.args, y.args[::-1]):
            if isinstance(c, Const) and isinstance(c.value, float):
                return Op("mul", (z, Const(2.0 * c.value, c.dtype)), y.dtype)
    return Op("mul", (y, Const(2.0, y.dtype)), y.dtype)


def _half_one_plus_tanh(node: Op) -> Node | None:
    """x * sigmoid(2 y) for (0.5 * x) * (1 + tanh(y)) or (x * 0.5) * (1 + tanh(y)), sigmoid(2 y) for
    0.5 * (1 + tanh(y)) (either order of each product), else None."""
    if node.name != "mul" or not is_float(node.dtype):
        return None
    for half, plus in (node.args, node.args[::-1]):
        y = _tanh_of_one_plus(plus)
        if y is None or y.dtype != node.dtype:
            continue
        sigmoid = Op("sigmoid", (_doubled(y),), node.dtype)
        if _is_const(half, 0.5):
            return sigmoid
        if isinstance(half, Op) and half.name == "mul":
            for c, x in (half.args, half.args[::-1]):
                if _is_const(c, 0.5) and x.dtype == node.dtype:
                    return Op("mul", (x, sigmoid), node.dtype)
    return None
