import torch


class TwoArgs(torch.nn.Module):
    def forward(self, x, n):
        return x * n


model = TwoArgs()
example_inputs = (torch.randn(2, 3), 4)
