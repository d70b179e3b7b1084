"""A model.py written the torch.export way: dynamic_shapes with a Dim (no dynamic_axes)."""

import torch
from torch.export import Dim

model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
example_inputs = (torch.randn(3, 8),)
dynamic_shapes = {"input": {0: Dim("batch", min=1, max=64)}}
