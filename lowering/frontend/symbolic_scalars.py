"""Python arithmetic on sizes that gives a float or a bool, as scalar expressions the kernels compute.

torch.export records a model's arithmetic on sizes as call_function nodes of Python's operators. Those whose
value is an int are sizes, and stay sympy expressions over the declared symbols (GraphLowering.sym). Those
whose value is a float or a bool (a SymFloat, a SymBool) are data: GroupNorm divides its sums by the group's
element count as a float, and F.interpolate's nearest and bilinear modes scale output positions by h / (2 h) or
(h - 1) / (out - 1). These become scalar IR expressions of the sizes (an IndexValue cast to float64, then the
operators), computed in float64 as Python computes them, and a tensor op takes one as it takes a Python number
(ops/pointwise.py: cast to the dtype the op computes in).
"""

from __future__ import annotations

import operator
from typing import Any

import sympy
import torch
import torch.fx

from ...errors import UnsupportedError
from ..ir import scalar
from ..ir.dtypes import is_float

# operator -> the scalar IR's op name ("float": Python's float() of a size)
OPS = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div", operator.neg: "neg",
    operator.ge: "ge", operator.gt: "gt", operator.le: "le", operator.lt: "lt", operator.eq: "eq",
    operator.ne: "ne", torch.sym_float: "float",
}
COMPARISONS = {"ge", "gt", "le", "lt", "eq", "ne"}


def is_symbolic_scalar(node: torch.fx.Node) -> bool:
    """A node of Python arithmetic on sizes whose value is a float or a bool."""
    return node.target in OPS and isinstance(node.meta.get("val"), (torch.SymFloat, torch.SymBool))


def operand(value: Any) -> scalar.Node:
    """A size (sympy), an earlier symbolic scalar, or a Python number, as a scalar IR node.

    A sympy number that is not an integer (a size divided exactly, as in `h / 2` of a static h) is a float64
    constant, as Python gives it. Tensor ops take their scalar operands through this too (ops/pointwise.py).
    """
    if isinstance(value, (scalar.Load, scalar.Const, scalar.IndexValue, scalar.Op)):
        return value
    if isinstance(value, sympy.Expr):
        if value.is_number and not value.is_Integer:
            return scalar.Const(float(value), "float64")
        return scalar.IndexValue(value, "int64")
    if isinstance(value, bool):
        return scalar.Const(value, "bool")
    if isinstance(value, int):
        return scalar.Const(value, "int64")
    if isinstance(value, float):
        return scalar.Const(value, "float64")
    raise UnsupportedError(f"a scalar operand of type {type(value).__name__} ({value!r}) is not supported")


def lower(node: torch.fx.Node, args: list[Any]) -> scalar.Node:
    """The scalar expression of `node` (is_symbolic_scalar) over its lowered arguments."""
    name = OPS[node.target]
    parts = [operand(a) for a in args]
    if name == "float":
        return scalar.cast(parts[0], "float64")
    # Python's arithmetic: a float operand (or true division) makes the operation float64, else int64
    compute = "float64" if name == "div" or any(is_float(p.dtype) for p in parts) else "int64"
    parts = [scalar.cast(p, compute) for p in parts]
    return scalar.Op(name, tuple(parts), "bool" if name in COMPARISONS else compute)
