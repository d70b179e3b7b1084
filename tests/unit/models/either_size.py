import torch


class Upsample(torch.nn.Module):
    """A transposed convolution whose padding exceeds the kernel's reach: its output is 3h - 6 by 3w - 6, and
    torch guards that it is not empty as `(3*w - 6 > 0) | (3*h - 6 > 0)`, which h, w = 1..8 breaks at 2 x 2."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(2, 2, 3, stride=3, padding=3)

    def forward(self, x):
        return self.up(x)  # EITHER


def model():
    torch.manual_seed(0)
    return Upsample()


example_inputs = (torch.randn(1, 2, 5, 6),)
dynamic_axes = {"x": {2: "h", 3: "w"}}
dynamic_ranges = {"h": (1, 8), "w": (1, 8)}
