import torch


class Nested(torch.nn.Module):
    def forward(self, x):
        return x + 1, [x * 2, {"z": x - 1}]


model = Nested()
example_inputs = (torch.randn(2, 3),)
