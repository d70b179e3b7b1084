import torch


class TwoLoops(torch.nn.Module):
    def forward(self, x):
        total = x[:1, :1] * 0
        for b in range(x.shape[0]):  # BATCH
            for t in range(x.shape[1]):
                total = total + x[b, t]
        return total


model = TwoLoops()
example_inputs = (torch.randn(3, 4),)
dynamic_axes = {"x": {0: "batch", 1: "seq"}}
dynamic_ranges = {"batch": (1, 8), "seq": (1, 64)}
