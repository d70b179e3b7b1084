"""The special functions eager computes with its own algorithms (aten/src/ATen/native/Math.h): erfinv, ndtri,
i0, i0e, i1, i1e, digamma and trigamma (polygamma n = 0, 1), erfcx, frexp, nextafter and the angle of reals,
on random values and on each one's edges (0 and -0, +-1, +-inf, NaN, poles, branch boundaries). Run by
tests/e2e/test_ops.py through the C++ runtime and by tests/codegen/test_triton_special.py in the Triton
interpreter."""

import torch
from torch import nn

EDGES = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), 1e-30, -1e-30, 1e-45, -1e-45, 0.5, -0.5,
         0.7, -0.7, 0.9999, -0.99999, 8.0, -8.0, 10.0, -2.0, -2.5, 50.0, 51.0, -6.1, -6.2, -26.8, 5e7, 6e7, 1e20,
         -1e20, 3.4e38]


class SpecialFunctions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("edges", torch.tensor(EDGES))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        v = torch.cat([x.flatten(), self.edges])
        unit = torch.tanh(v)  # (-1, 1) and its ends
        return (torch.erfinv(v), torch.erfinv(unit), torch.special.ndtri(v), torch.special.ndtri(torch.sigmoid(v * 4)),
                torch.i0(v * 6), torch.special.i0e(v * 6), torch.special.i1(v * 6), torch.special.i1e(v * 6),
                torch.digamma(v * 4), torch.polygamma(1, v * 4), torch.special.polygamma(0, v),
                torch.special.erfcx(v * 12), *torch.frexp(v * 100), torch.nextafter(v, v.flip(0)),
                torch.nextafter(v, torch.zeros_like(v)), torch.angle(v))


def model() -> nn.Module:
    return SpecialFunctions()


example_inputs = (torch.randn(3, 40),)
dynamic_axes = {"x": {0: "batch", 1: "n"}}
dynamic_ranges = {"batch": (1, 4), "n": (1, 64)}
