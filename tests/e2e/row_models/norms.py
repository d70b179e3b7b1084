"""Layer norm of a residual sum, a softmax outside attention, an RMS norm, a min, an any, and a sum and a max
over 5 x 10 blocks, over rows of 50 (not a multiple of the C++ kernels' 8 lanes, nor a power of two: the tails
and masks run), for tests/e2e/test_row_kernels.py."""

import torch
from torch import nn


class Norms(nn.Module):
    def __init__(self, dim: int = 50) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        h = self.norm(x + y)
        scores = self.proj(h).softmax(-1)
        g = h.float()
        rms = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight).to(h.dtype)
        # in h's dtype: verification judges a float32 output of bfloat16 values at float32's tolerance
        shifted = (g - g.amin(-1, keepdim=True)).to(h.dtype)
        flagged = torch.where((g > 1.5).any(-1, keepdim=True), g, -g).to(h.dtype)
        blocks = h.view(-1, 5, 10)  # reductions over two dimensions: nested loops, no lanes
        centred = (blocks - blocks.mean((-2, -1), keepdim=True)) * blocks.amax((-2, -1), keepdim=True)
        return scores, rms, shifted, flagged, centred, h.sum(-1)  # the last: a reduction that is an output, never fused


def model() -> nn.Module:
    torch.manual_seed(0)
    m = Norms()
    with torch.no_grad():
        m.norm.weight.uniform_(0.5, 1.5)
        m.norm.bias.uniform_(-0.5, 0.5)
    return m


example_inputs = (torch.randn(3, 50), torch.randn(3, 50))

dynamic_axes = {"x": {0: "n"}, "y": {0: "n"}}
dynamic_ranges = {"n": (1, 64)}
