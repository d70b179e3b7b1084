import torch


class InPlace(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)  # MUTATE
        return x + 1


model = InPlace()
example_inputs = (torch.randn(2, 3),)
