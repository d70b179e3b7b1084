"""A test hook that makes a package wrong on purpose (AOTPACK_TEST_PERTURB=FACTOR): the last floating-point
pointwise kernel's output is scaled by FACTOR. Tests use it to prove that export-time verification catches a
wrong kernel and names the point and the output; without the variable this module changes nothing."""

from __future__ import annotations

from dataclasses import replace

from . import scalar
from .ir import PointwiseKernel, Program


def perturbed(program: Program, factor: float) -> Program:
    steps = list(program.steps)
    for i in reversed(range(len(steps))):
        step = steps[i]
        if isinstance(step, PointwiseKernel) and scalar.is_float(step.value.dtype):
            wide = scalar.cast(step.value, "float32")
            scaled = scalar.Op("mul", (wide, scalar.Const(factor, "float32")), "float32")
            steps[i] = replace(step, value=scalar.cast(scaled, step.value.dtype))
            return replace(program, steps=tuple(steps))
    return program
