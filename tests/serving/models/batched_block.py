"""examples/transformer_block with a dynamic batch as well as a dynamic sequence: requests of one length can
be batched by Triton (batch is dim 0 of the input and the output), requests of other lengths run apart."""

import importlib.util
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location(
    "transformer_block", Path(__file__).resolve().parents[3] / "examples" / "transformer_block" / "model.py")
_block = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_block)

model = _block.model
example_inputs = (torch.randn(2, 16, 64),)
dynamic_axes = {"x": {0: "batch", 1: "seq"}}
dynamic_ranges = {"batch": (1, 16), "seq": (1, 64)}
