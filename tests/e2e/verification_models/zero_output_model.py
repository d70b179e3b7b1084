"""A model whose first output is all zeros whatever the input (a layer initialised to zero), beside one that is
not: verification can only say the first matched vacuously."""

import torch
from torch import nn


class HalfZero(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)
        nn.init.zeros_(self.lin.weight)
        nn.init.zeros_(self.lin.bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.lin(x), x * 2


model = HalfZero()
example_inputs = (torch.randn(3, 8),)
dynamic_axes = {"x": {0: "batch"}}
dynamic_ranges = {"batch": (1, 16)}
