import torch


class DataBranch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # DATA
            return x + 1
        return x - 1


model = DataBranch()
example_inputs = (torch.randn(2, 10),)
dynamic_axes = {"x": {1: "seq"}}
dynamic_ranges = {"seq": (1, 64)}
