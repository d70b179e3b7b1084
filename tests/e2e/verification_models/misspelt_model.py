"""dynamic_shapes misspelt: export must refuse it by name instead of exporting static shapes."""

import torch
from torch.export import Dim

model = torch.nn.Linear(8, 4)
example_inputs = (torch.randn(3, 8),)
dynamic_shape = {"input": {0: Dim("batch", min=1, max=64)}}
