"""Norms between products, as pre-norm and post-norm models place them: a layer norm of the input into a
linear layer with a bias; an RMS norm written as Llama writes it (the normalised row rounded to the input's
dtype before the weight multiplies it) into two linear layers without a bias; a layer norm whose output is also
the residual (post-norm, BERT's); and a final layer norm into an output projection tied to the embedding the
second output gathers from. Session 14's norm-folding experiment (branch experiment/norm-folding) folded the
first two into their products; kept for the Triton interpreter test. Rows of 50: not a multiple of the C++
kernels' 8 lanes, nor of a Triton block."""

import torch
from torch import nn


class FoldedNorms(nn.Module):
    def __init__(self, vocab: int = 40, dim: int = 50, hidden: int = 72) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.rms_weight = nn.Parameter(torch.linspace(0.5, 1.5, dim))
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.value = nn.Linear(dim, hidden, bias=False)
        self.out = nn.Linear(hidden, dim, bias=False)
        self.post = nn.LayerNorm(dim)
        self.mix = nn.Linear(dim, dim)
        self.final = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + self.down(torch.relu(self.up(self.norm(x))))
        variance = h.float().pow(2).mean(-1, keepdim=True)
        r = self.rms_weight * (h.float() * torch.rsqrt(variance + 1e-6)).to(h.dtype)
        h = h + self.out(torch.nn.functional.silu(self.gate(r)) * self.value(r))
        p = self.post(h)
        h = p + self.mix(p)
        return self.final(h) @ self.embed.weight.t(), self.embed(ids)


def model() -> nn.Module:
    torch.manual_seed(0)
    m = FoldedNorms()
    with torch.no_grad():
        for norm in (m.norm, m.post, m.final):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    return m


example_inputs = (torch.randn(2, 5, 50), torch.tensor([[1, 4, 9, 0, 2], [3, 3, 7, 11, 39]]))

dynamic_axes = {"x": {0: "batch", 1: "seq"}, "ids": {0: "batch", 1: "seq"}}
dynamic_ranges = {"batch": (1, 4), "seq": (1, 40)}
