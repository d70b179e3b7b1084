"""Pooling windows too large to unroll, over a dynamic height: adaptive average pooling to 2 x 3 (windows up to
21 x 25 elements, a masked sum over the largest window) beside one to 5 x 7 (unrolled), and max pooling with
YOLO's spatial pyramid windows (13 x 13, stride 1; 9 x 9, stride 2, both padded), a max over the window, and
adaptive max pooling (to 2 x 3 and to 1, a max over the largest window). Run by
tests/e2e/test_ops.py through the C++ runtime and by tests/codegen/test_triton_compile.py in the Triton
interpreter."""

import torch
import torch.nn.functional as F
from torch import nn


def pooled(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    image = x.permute(1, 0, 2)[None]  # (1, 3, n, 70)
    return (F.adaptive_avg_pool2d(image, (2, 3)), F.adaptive_avg_pool2d(image * 2, (5, 7)),
            F.max_pool2d(image, 13, 1, 6), F.max_pool2d(image, 9, 2, 4),
            F.adaptive_max_pool2d(image, (2, 3)), F.adaptive_max_pool2d(image, 1))


class Pooled(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return pooled(x)


def model() -> nn.Module:
    return Pooled()


example_inputs = (torch.randn(9, 3, 70),)
dynamic_axes = {"x": {0: "n"}}
dynamic_ranges = {"n": (3, 40)}  # the stride-2 pooling makes n <= 2 one row, a constant
