"""EmbeddingBag over offsets: valid offsets are sorted from 0, which the examples' values repeated to a larger
size are not, so the file gives verification its own inputs at each point's sizes."""

import torch
from torch import nn


class Bags(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bags = nn.EmbeddingBag(20, 8, mode="mean")

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.bags(ids, offsets)


def model() -> nn.Module:
    return Bags()


def verification_inputs(sizes: dict[str, int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    starts = torch.sort(torch.randint(0, sizes["n"] + 1, (sizes["bags"] - 1,), generator=gen)).values
    return torch.randint(0, 20, (sizes["n"],), generator=gen), torch.cat([torch.zeros(1, dtype=torch.int64), starts])


example_inputs = (torch.tensor([1, 5, 7, 2, 9, 3]), torch.tensor([0, 4, 4]))
dynamic_axes = {"ids": {0: "n"}, "offsets": {0: "bags"}}
dynamic_ranges = {"n": (1, 40), "bags": (1, 12)}
