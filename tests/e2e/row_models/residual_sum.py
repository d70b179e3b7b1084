"""Llama's residual pattern: a product's output added to the residual stream, the sum read by an RMS norm and
by the next residual add and never stored (the row kernel and the down projection's epilogue each add it
again). Rows of 50; for the Triton interpreter test."""

import torch
from torch import nn


class ResidualSum(nn.Module):
    def __init__(self, dim: int = 50, hidden: int = 72) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = residual + self.proj(x)
        variance = h.float().pow(2).mean(-1, keepdim=True)
        n = (h.float() * torch.rsqrt(variance + 1e-6)).to(h.dtype)
        return h + self.down(torch.relu(self.up(n)))


def model() -> nn.Module:
    torch.manual_seed(0)
    return ResidualSum()


example_inputs = (torch.randn(2, 5, 50), torch.randn(2, 5, 50))

dynamic_axes = {"x": {0: "batch", 1: "seq"}, "residual": {0: "batch", 1: "seq"}}
dynamic_ranges = {"batch": (1, 4), "seq": (1, 40)}
