import torch


class OneSize(torch.nn.Module):
    """XLNet's shape: a guard, ((seq**2)//seq) == 12, that only one size of the range meets."""

    def forward(self, x):
        if (x.shape[0] ** 2) // x.shape[0] == 12:  # BRANCH
            return x * 2
        return x - 1


def model():
    return OneSize()


example_inputs = (torch.randn(12, 3),)
dynamic_axes = {"x": {0: "seq"}}
dynamic_ranges = {"seq": (4, 20)}
