"""GPT-2 (transformers' GPT2LMHeadModel) from a config with random weights: input_ids -> logits.

Small by default so the tests are fast; AOTPACK_EXAMPLE_SIZE=full (or build("full")) gives GPT-2 124M.
"""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

CONFIGS = {
    "small": {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_inner": 128, "vocab_size": 1000, "n_positions": 2048,
              "bos_token_id": 0, "eos_token_id": 0},
    # GPT-2 124M with the context raised to 2048 so one package covers seq=1..2048.
    "full": {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 2048},
}


def build(size: str = "small", attn_implementation: str = "sdpa") -> GPT2LMHeadModel:
    config = GPT2Config(
        **CONFIGS[size],
        # use_cache=False: no past_key_values among the outputs (the package returns tensors only).
        use_cache=False,
        # sdpa, transformers' default, named so the captured graph does not follow the default: one aten op
        # that the exporter decomposes to matmul + masked softmax. "eager" (matmul, additive mask, softmax;
        # repeat_kv for grouped-query attention) exports as well; tests/e2e/test_hf_models.py runs both.
        attn_implementation=attn_implementation,
    )
    torch.manual_seed(0)  # the same weights each time the file is loaded, so runs can be compared with eager
    return GPT2LMHeadModel(config).eval()


def model() -> GPT2LMHeadModel:
    return build(os.environ.get("AOTPACK_EXAMPLE_SIZE", "small"))


def example_inputs() -> tuple[torch.Tensor, ...]:
    vocab = CONFIGS[os.environ.get("AOTPACK_EXAMPLE_SIZE", "small")]["vocab_size"]
    return (torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(0)),)


dynamic_axes = {"input_ids": {0: "batch", 1: "seq"}}
dynamic_ranges = {"batch": (1, 2), "seq": (1, 2048)}
