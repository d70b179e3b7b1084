"""A small CNN with dynamic batch and spatial size: conv, batch norm, pooling, linear head."""

import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, stride=1, padding=1, groups=2),
            nn.BatchNorm2d(32),
            nn.SiLU(),
            nn.AvgPool2d(2),
            nn.Conv2d(32, 32, kernel_size=1),
        )
        self.head = nn.Linear(32, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.features(image)
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return torch.log_softmax(self.head(x), dim=-1)


def model() -> nn.Module:
    torch.manual_seed(0)
    net = SmallCNN()
    # Non-trivial batch-norm statistics, so that eval-mode normalisation is really exercised.
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return net


example_inputs = (torch.randn(2, 3, 32, 32),)

dynamic_axes = {"image": {0: "batch", 2: "height", 3: "width"}}
dynamic_ranges = {"batch": (1, 8), "height": (8, 64), "width": (8, 64)}
