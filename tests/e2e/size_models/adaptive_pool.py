"""Adaptive average pooling of a dynamic height: to 2 x 3, whose windows (up to 21 x 25 elements) are a masked
sum over the largest window (a reduction), and to 5 x 7, whose windows are unrolled. Run by tests/e2e/test_ops.py
through the C++ runtime and by tests/codegen/test_triton_compile.py in the Triton interpreter."""

import torch
import torch.nn.functional as F
from torch import nn


def pooled(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    image = x.permute(1, 0, 2)[None]  # (1, 3, n, 70)
    return F.adaptive_avg_pool2d(image, (2, 3)), F.adaptive_avg_pool2d(image * 2, (5, 7))


class Pooled(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return pooled(x)


def model() -> nn.Module:
    return Pooled()


example_inputs = (torch.randn(9, 3, 70),)
dynamic_axes = {"x": {0: "n"}}
dynamic_ranges = {"n": (1, 40)}
