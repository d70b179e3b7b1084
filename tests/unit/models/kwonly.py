import torch


class KwOnly(torch.nn.Module):
    def forward(self, x, *, scale):
        return x * scale


model = KwOnly()
example_inputs = (torch.randn(2, 3),)
