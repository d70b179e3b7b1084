"""Transposed convolutions (ConvTranspose1d/2d) over a dynamic batch, height and width: stride with
output_padding, unequal strides with dilation and groups, a padding larger than the kernel's reach (the
direct convolution crops), and 1-d without bias. Run by tests/e2e/test_ops.py through the C++ runtime and by
tests/codegen/test_triton_compile.py in the Triton interpreter."""

import torch
from torch import nn


class Upsampling(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.b = nn.ConvTranspose2d(6, 4, (2, 3), stride=(2, 1), padding=(0, 2), dilation=(1, 2), groups=2)
        self.c = nn.ConvTranspose1d(4, 3, 4, stride=3, bias=False)
        self.d = nn.ConvTranspose2d(4, 2, 3, stride=3, padding=3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.b(torch.relu(self.a(x))), self.c(x.mean(2)), self.d(x)


def model() -> nn.Module:
    torch.manual_seed(0)
    return Upsampling()


example_inputs = (torch.randn(2, 4, 5, 6),)
dynamic_axes = {"x": {0: "batch", 2: "h", 3: "w"}}
dynamic_ranges = {"batch": (1, 3), "h": (3, 12), "w": (3, 12)}  # the padded one needs h, w >= 3
