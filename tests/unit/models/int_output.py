import torch


class ReturnsInt(torch.nn.Module):
    def forward(self, x):
        return x * 2, {"count": 3}


model = ReturnsInt()
example_inputs = (torch.randn(2, 3),)
