"""A pre-norm model's shapes: token embeddings and a layer norm into a linear layer (the gather and its index
check in the row kernel), an RMS norm read by two linear layers without bias (a gated MLP's gate and up
projections), and a softmax into a product with a weight. Rows of 50 and 72 (not a multiple of the C++
kernels' 8 lanes, nor of a Triton block) with a batch and a sequence dimension, for the Triton interpreter
test in tests/codegen/test_triton_compile.py."""

import torch
from torch import nn


class PreNorm(nn.Module):
    def __init__(self, vocab: int = 12, dim: int = 50, hidden: int = 72) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.rms_weight = nn.Parameter(torch.linspace(0.5, 1.5, hidden))
        self.down = nn.Linear(hidden, dim, bias=False)
        self.gate = nn.Linear(hidden, dim, bias=False)
        self.mix = nn.Parameter(torch.randn(dim, 20))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        u = self.up(self.norm(self.embed(ids) * 2))
        g = u.float()
        r = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-6) * self.rms_weight).to(u.dtype)
        return (torch.nn.functional.silu(self.gate(r)) * self.down(r)).softmax(-1) @ self.mix


def model() -> nn.Module:
    torch.manual_seed(0)
    m = PreNorm()
    with torch.no_grad():
        m.norm.weight.uniform_(0.5, 1.5)
        m.norm.bias.uniform_(-0.5, 0.5)
    return m


example_inputs = (torch.tensor([[1, 4, 9, 0, 2], [3, 3, 7, 11, 5]]),)

dynamic_axes = {"ids": {0: "batch", 1: "seq"}}
dynamic_ranges = {"batch": (1, 4), "seq": (1, 40)}
