"""ViT (transformers' ViTModel) from a config with random weights: pixel_values -> hidden states.

A dynamic batch of images at a fixed size. Outputs: the last hidden state and the pooled output.
Small by default so the tests are fast; AOTPACK_EXAMPLE_SIZE=full (or build("full")) gives ViT-base/16
at 224x224.
"""

import os

import torch
from transformers import ViTConfig, ViTModel

CONFIGS = {
    "small": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
              "image_size": 32, "patch_size": 8},
    "full": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072,
             "image_size": 224, "patch_size": 16},
}


def _size() -> str:
    return os.environ.get("AOTPACK_EXAMPLE_SIZE", "small")


def build(size: str = "small", attn_implementation: str = "sdpa") -> ViTModel:
    # sdpa, transformers' default, named so the captured graph does not follow the default: one aten op that
    # the exporter decomposes to matmul + softmax; "eager" (matmul, softmax) exports as well.
    config = ViTConfig(**CONFIGS[size], attn_implementation=attn_implementation)
    torch.manual_seed(0)  # the same weights each time the file is loaded, so runs can be compared with eager
    return ViTModel(config).eval()


def model() -> ViTModel:
    return build(_size())


def example_inputs() -> tuple[torch.Tensor, ...]:
    side = CONFIGS[_size()]["image_size"]
    return (torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(0)),)


dynamic_axes = {"pixel_values": {0: "batch"}}
dynamic_ranges = {"batch": (1, 16)}
