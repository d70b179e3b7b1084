"""A model whose intermediate exceeds float16's range (65504) although its output does not: in fp16 both eager
PyTorch and the package overflow, and verification must say that the model, not aotpack, is at fault."""

import torch


class Overflows(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 16, bias=False)
        self.down = torch.nn.Linear(16, 4, bias=False)
        with torch.no_grad():
            self.up.weight.fill_(300.0)
            self.down.weight.fill_(1e-4)

    def forward(self, x):
        return self.down(self.up(x + 20.0))


model = Overflows()
example_inputs = (torch.randn(2, 16),)
dynamic_axes = {"x": {0: "batch"}}
dynamic_ranges = {"batch": (1, 8)}
