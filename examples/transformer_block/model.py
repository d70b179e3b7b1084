"""A pre-norm transformer block with causal self-attention and a dynamic sequence length."""

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, hidden: int = 256) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, seq, dim))
        return x + self.mlp(self.norm2(x))



def model() -> nn.Module:
    torch.manual_seed(0)  # the same weights each time the file is loaded, so runs can be compared with eager
    return Block()


example_inputs = (torch.randn(2, 16, 64),)

dynamic_axes = {"x": {1: "seq"}}
dynamic_ranges = {"seq": (1, 256)}
