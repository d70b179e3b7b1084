"""Python arithmetic on a dynamic size that gives a float or a bool (frontend/symbolic_scalars.py): GroupNorm's
element count as a float, F.interpolate's nearest and bilinear (align_corners) scales, true division, a float
scale and offset of the size, a comparison used as a number, negation. The image's height is the dynamic n.
Run by tests/e2e/test_ops.py through the C++ runtime and by tests/codegen/test_triton_compile.py in the Triton
interpreter."""

import torch
import torch.nn.functional as F
from torch import nn


def sized(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = x.shape[0]
    image = x.permute(1, 0, 2)[None]  # (1, 4, n, 6)
    return (F.group_norm(image, 2), F.interpolate(image, scale_factor=2, mode="nearest"),
            F.interpolate(image, size=(7, 9), mode="nearest"),
            F.interpolate(image, size=(7, 9), mode="bilinear", align_corners=True),
            x / (n * 2.5) + (n - 0.5) - 1 / n, x * torch.sym_float(n >= 3), -(n / 4.0) * x)


class Sized(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return sized(x)


def model() -> nn.Module:
    return Sized()


example_inputs = (torch.randn(5, 4, 6),)
dynamic_axes = {"x": {0: "n"}}
dynamic_ranges = {"n": (1, 9)}
