import torch


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] == 16:  # BRANCH
            return x + 1
        return x - 1


model = Branchy()
example_inputs = (torch.randn(2, 10),)
dynamic_axes = {"x": {1: "seq"}}
dynamic_ranges = {"seq": (1, 64)}
