import torch


class Patches(torch.nn.Module):
    """ConvNeXt's stem and first downsampling: a 4 x 4 patch convolution, then a 2 x 2 one, each flattened
    to tokens. The first adds guards that h = 8..96 satisfies; the second needs h >= 16."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 4, 4, stride=4)
        self.down = torch.nn.Conv2d(4, 4, 2, stride=2)

    def forward(self, x):
        y = self.stem(x)
        a = y.flatten(2).transpose(1, 2).softmax(1)  # HOLDS
        z = self.down(y)  # NEEDS16
        b = z.flatten(2).transpose(1, 2).softmax(1)
        return a.sum(1) + b.sum(1)


def model():
    torch.manual_seed(0)
    return Patches()


example_inputs = (torch.randn(1, 3, 32, 32),)
dynamic_axes = {"x": {2: "h"}}
dynamic_ranges = {"h": (8, 96)}
