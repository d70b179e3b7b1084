import torch


class Remainder(torch.nn.Module):
    """A size computed as int(sqrt(h * w % 8)): torch.export fixes it to the example's 2 under a guard that
    holds at every corner of h, w = 2..6 (h * w % 8 is 4 there) and fails inside, at h = w = 4."""

    def forward(self, x):
        h, w = x.shape
        k = int((h * w % 8) ** 0.5)
        return x * k


def model():
    return Remainder()


example_inputs = (torch.randn(2, 2),)
dynamic_axes = {"x": {0: "h", 1: "w"}}
dynamic_ranges = {"h": (2, 6), "w": (2, 6)}
