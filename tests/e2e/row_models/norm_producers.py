"""Norms whose rows a product has just stored and whose results only products read, so that
ir/norm_folding.py folds them: a layer norm of a linear layer's output into a linear layer with a bias, an RMS
norm written as Llama writes it (the normalised row rounded to the input's dtype before its weight) into a gated
MLP's two projections (one paired product), and a final layer norm into an output head. Rows of 48 (three groups
of 16) in batch x seq rows; 48 is not a multiple of the C++ kernels' 8 lanes' 64-column tiles, nor of a Triton
block."""

import torch
from torch import nn


class NormProducers(nn.Module):
    def __init__(self, features: int = 24, dim: int = 48, hidden: int = 80, classes: int = 10) -> None:
        super().__init__()
        self.inp = nn.Linear(features, dim)
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.rms_weight = nn.Parameter(torch.linspace(0.5, 1.5, dim))
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.value = nn.Linear(dim, hidden, bias=False)
        self.out = nn.Linear(hidden, dim, bias=False)
        self.final = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x) * 3 + 1  # rows with a mean and a spread of their own
        h = h + self.down(torch.relu(self.up(self.norm(h))))
        variance = h.float().pow(2).mean(-1, keepdim=True)
        r = self.rms_weight * (h.float() * torch.rsqrt(variance + 1e-6)).to(h.dtype)
        h = h + self.out(torch.nn.functional.silu(self.gate(r)) * self.value(r))
        return self.head(self.final(h))


def model() -> nn.Module:
    torch.manual_seed(0)
    m = NormProducers()
    with torch.no_grad():
        for norm in (m.norm, m.final):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    return m


example_inputs = (torch.randn(2, 5, 24),)

dynamic_axes = {"x": {0: "batch", 1: "seq"}}
dynamic_ranges = {"batch": (1, 4), "seq": (1, 40)}
