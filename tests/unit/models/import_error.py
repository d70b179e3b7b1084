import torch

WIDTH = 8
layer = torch.nn.Linear(WIDTH, undefined_width)  # IMPORT  # noqa: F821
