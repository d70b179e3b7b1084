"""Token embeddings and a layer norm: the gather (and its index check) runs inside the row kernel, as in
GPT-2's first block, for tests/e2e/test_row_kernels.py."""

import torch
from torch import nn


class EmbedNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 24)
        self.norm = nn.LayerNorm(24)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.norm(self.embed(ids) * 2)


def model() -> nn.Module:
    torch.manual_seed(0)
    return EmbedNorm()


example_inputs = (torch.tensor([1, 4, 9, 0, 2]),)

dynamic_axes = {"ids": {0: "n"}}
dynamic_ranges = {"n": (1, 64)}
