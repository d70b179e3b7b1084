import torch


class Broken(torch.nn.Module):
    def forward(self, x):
        y = x.view(-1, 7)  # RAISE
        return y


model = Broken()
example_inputs = (torch.randn(3, 10),)
