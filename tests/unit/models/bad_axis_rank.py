import torch

model = torch.nn.ReLU()
example_inputs = (torch.randn(2, 5),)
dynamic_axes = {"input": {2: "seq"}}
dynamic_ranges = {"seq": (1, 64)}
