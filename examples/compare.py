"""Makes inputs for a model.py and checks aotpack-run's outputs against eager PyTorch (used by the demo).

    python examples/compare.py inputs  examples/mlp/model.py in.safetensors  input=5,32
    python examples/compare.py check   examples/mlp/model.py in.safetensors out.safetensors
"""

from __future__ import annotations

import sys

import torch
from safetensors.torch import load_file, save_file

from aotpack.exporter import load_model_file
from aotpack.verification import relative_error


def make_inputs(model_file: str, path: str, *shapes: str) -> None:
    spec = load_model_file(model_file)
    names = spec.input_names
    given = dict(s.split("=") for s in shapes)
    tensors = {}
    for name, example in zip(names, spec.example_inputs):
        shape = [int(d) for d in given[name].split(",")] if name in given else list(example.shape)
        tensors[name] = torch.randn(shape).to(example.dtype)
    save_file(tensors, path)
    print(f"wrote {path}: " + ", ".join(f"{k}{list(v.shape)}" for k, v in tensors.items()))


def check(model_file: str, inputs_path: str, outputs_path: str) -> None:
    spec = load_model_file(model_file)
    inputs = load_file(inputs_path)
    with torch.no_grad():
        expected = spec.model.eval()(*[inputs[n] for n in spec.input_names])
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    outputs = load_file(outputs_path)
    names = ["output"] if len(expected) == 1 else [f"output_{i}" for i in range(len(expected))]
    worst = 0.0
    for name, ref in zip(names, expected):
        err = relative_error(outputs[name].numpy(), ref.numpy())
        worst = max(worst, err)
        print(f"{name}: relative error vs eager PyTorch {err:.2e}")
    sys.exit(0 if worst <= 1e-5 else 1)


if __name__ == "__main__":
    {"inputs": make_inputs, "check": check}[sys.argv[1]](*sys.argv[2:])
