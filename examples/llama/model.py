"""Llama (transformers' LlamaForCausalLM) from a config with random weights: input_ids -> logits.

Grouped-query attention (fewer key/value heads than query heads), rotary position embeddings, RMS norm
and a SiLU-gated MLP. Small by default so the tests are fast; AOTPACK_EXAMPLE_SIZE=full (or build("full"))
gives the 156M model of the benchmark (8 layers, d 1024, 16 heads, 4 KV heads, ffn 2816, vocab 32000).
"""

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

CONFIGS = {
    "small": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128, "vocab_size": 1000, "bos_token_id": 0, "eos_token_id": 0},
    "full": {"num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
             "intermediate_size": 2816, "vocab_size": 32000},
}


def build(size: str = "small", attn_implementation: str = "sdpa") -> LlamaForCausalLM:
    config = LlamaConfig(
        **CONFIGS[size],
        max_position_embeddings=2048,
        # use_cache=False: no key/value cache among the outputs (the package returns tensors only).
        use_cache=False,
        # sdpa, transformers' default, named so the captured graph does not follow the default: one aten op
        # that the exporter decomposes to matmul + masked softmax. "eager" (matmul, additive mask, softmax;
        # repeat_kv for grouped-query attention) exports as well; tests/e2e/test_hf_models.py runs both.
        attn_implementation=attn_implementation,
    )
    torch.manual_seed(0)  # the same weights each time the file is loaded, so runs can be compared with eager
    return LlamaForCausalLM(config).eval()


def model() -> LlamaForCausalLM:
    return build(os.environ.get("AOTPACK_EXAMPLE_SIZE", "small"))


def example_inputs() -> tuple[torch.Tensor, ...]:
    vocab = CONFIGS[os.environ.get("AOTPACK_EXAMPLE_SIZE", "small")]["vocab_size"]
    return (torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(0)),)


dynamic_axes = {"input_ids": {0: "batch", 1: "seq"}}
dynamic_ranges = {"batch": (1, 2), "seq": (1, 2048)}
