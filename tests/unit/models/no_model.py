import torch

example_inputs = (torch.randn(2, 3),)
