import torch


class Masked(torch.nn.Module):
    def forward(self, x, mask):
        y = x * mask.unsqueeze(-1)
        return y.sum(1), y.amax(-1)


model = Masked
example_inputs = (torch.randn(3, 5, 4), torch.ones(3, 5))
dynamic_axes = {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", -1: "seq"}}
dynamic_ranges = {"batch": (1, 8), "seq": (1, 128)}
