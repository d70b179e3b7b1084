"""Token ids -> summed embeddings -> a linear layer, with a dynamic batch. An id outside 0..49 is a run-time
error that the runtime reports (the kernel's index check), which makes a request fail on its data alone."""

import torch
from torch import nn


class Bag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(ids).sum(dim=1))


def model() -> nn.Module:
    torch.manual_seed(0)
    return Bag()


example_inputs = (torch.randint(0, 50, (2, 8)),)
dynamic_axes = {"ids": {0: "batch"}}
dynamic_ranges = {"batch": (1, 32)}
