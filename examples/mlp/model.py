"""A small MLP with a dynamic batch: the hello-world of aotpack."""

import torch
from torch import nn


def model() -> nn.Module:
    torch.manual_seed(0)  # the same weights each time the file is loaded, so runs can be compared with eager
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


example_inputs = (torch.randn(4, 32),)

# forward-argument name -> {axis: symbol}; symbol -> (min, max). `--dynamic batch=1..512` overrides.
dynamic_axes = {"input": {0: "batch"}}
dynamic_ranges = {"batch": (1, 64)}
