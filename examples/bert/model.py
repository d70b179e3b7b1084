"""BERT (transformers' BertModel) from a config with random weights.

Inputs: input_ids, attention_mask (1 = token, 0 = padding) and token_type_ids, each (batch, seq).
Outputs: the last hidden state and the pooled output.
Small by default so the tests are fast; AOTPACK_EXAMPLE_SIZE=full (or build("full")) gives BERT-base.
"""

import os

import torch
from transformers import BertConfig, BertModel

CONFIGS = {
    "small": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
              "vocab_size": 1000},
    # BERT-base with 2048 positions (the original has 512) so one package covers seq=1..2048.
    "full": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072,
             "vocab_size": 30522},
}


def build(size: str = "small", attn_implementation: str = "sdpa") -> BertModel:
    config = BertConfig(
        **CONFIGS[size],
        max_position_embeddings=2048,
        # sdpa, transformers' default, named so the captured graph does not follow the default: one aten op
        # that the exporter decomposes to matmul + masked softmax. "eager" (matmul, additive mask, softmax;
        # repeat_kv for grouped-query attention) exports as well; tests/e2e/test_hf_models.py runs both.
        attn_implementation=attn_implementation,
    )
    torch.manual_seed(0)  # the same weights each time the file is loaded, so runs can be compared with eager
    return BertModel(config).eval()


def _size() -> str:
    return os.environ.get("AOTPACK_EXAMPLE_SIZE", "small")


def model() -> BertModel:
    return build(_size())


def padded_inputs(batch: int, seq: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random tokens; sequence b keeps max(1, seq - (b + 1) * seq // (2 * batch)) tokens, then padding."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, CONFIGS[_size()]["vocab_size"], (batch, seq), generator=gen)
    lengths = torch.tensor([max(1, seq - (b + 1) * seq // (2 * batch)) for b in range(batch)])
    attention_mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    token_type_ids = (torch.arange(seq)[None, :] >= (lengths[:, None] // 2)).long() * attention_mask
    return input_ids, attention_mask, token_type_ids


def example_inputs() -> tuple[torch.Tensor, ...]:
    return padded_inputs(2, 16)


dynamic_axes = {name: {0: "batch", 1: "seq"} for name in ("input_ids", "attention_mask", "token_type_ids")}
dynamic_ranges = {"batch": (1, 2), "seq": (1, 2048)}
