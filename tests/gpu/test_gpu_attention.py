"""The fused attention kernel on CUDA (templates/triton/attention.py.jinja) against eager, across dtypes.

The cases of tests/e2e/test_attention.py (masks, all-masked rows, grouped-query heads, head dim 80, causal,
masks built from positions that become causal diagonals) in float32, float16 and bfloat16, at sizes that cross the kernel's row and key blocks.
"""

from __future__ import annotations

import copy

import pytest
import torch
from aotpack.exporter import ModelSpec
from aotpack.verification import to_numpy
from gpu_helpers import compare, export_cuda
from test_attention import HERE, _dead_block_pad, _pad, attention_model

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", ["causal", "padding_bool", "all_masked_rows", "gqa_causal_dim80", "causal_and_mask",
                                  # masks built from positions: causal diagonals 0, -1 and seq, with padding
                                  "padding_and_causal", "diagonal_minus_1_padding", "keys_past_a_memory"])
def test_attention_on_cuda(name, dtype, tmp_path, rt, cuda_arch):
    torch.manual_seed(0)
    dt = DTYPES[dtype]
    model = attention_model(name).to(dt)
    spec = ModelSpec(HERE, model, (torch.randn(2, 8, 16).to(dt), _pad(2, 8).to(dt)), ("x", "pad"),
                     {"x": {1: "seq"}, "pad": {1: "seq"}}, {"seq": (1, 300)})
    result = export_cuda(spec, tmp_path / f"{name}.aotpack", cuda_arch)
    session = rt.Model(result.path).session(device="cuda")
    reference = copy.deepcopy(model).float()  # the same (rounded) weights, computed in float32 like ours
    for seq in (1, 7, 64, 65, 129, 300):
        x, pad = torch.randn(2, seq, 16).to(dt), _pad(2, seq).to(dt)
        with torch.no_grad():
            expected, half = reference(x.float(), pad.float()), model(x, pad)
        compare(session.run([to_numpy(x), to_numpy(pad)]), [expected], result.manifest["signature"],
                f"{name} {dtype} seq {seq}", half=[half])


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", ["padding_additive", "padding_bool"])
def test_attention_skips_key_blocks_padding_removes_on_cuda(name, dtype, tmp_path, rt, cuda_arch):
    """Padding masks that remove whole blocks of keys (right and left padding, a hole, a row with every key
    masked), which the kernel skips (ir/mask_structure.py skips_dead_keys), against eager, at 150 and 300
    keys. In half precision the additive finfo(float32).min overflows to -inf, which gives a row with every
    key masked zeros where float32's reference averages: that row is left out there."""
    torch.manual_seed(0)
    dt = DTYPES[dtype]
    empty = dtype == "float32" or name == "padding_bool"
    model = attention_model(name).to(dt)
    spec = ModelSpec(HERE, model, (torch.randn(5, 8, 16).to(dt), _dead_block_pad(8).to(dt)), ("x", "pad"),
                     {"x": {1: "seq"}, "pad": {1: "seq"}}, {"seq": (1, 300)})
    result = export_cuda(spec, tmp_path / f"{name}.aotpack", cuda_arch)
    session = rt.Model(result.path).session(device="cuda")
    reference = copy.deepcopy(model).float()
    for seq in (150, 300):
        x, pad = torch.randn(5, seq, 16).to(dt), _dead_block_pad(seq, empty).to(dt)
        with torch.no_grad():
            expected, half = reference(x.float(), pad.float()), model(x, pad)
        compare(session.run([to_numpy(x), to_numpy(pad)]), [expected], result.manifest["signature"],
                f"{name} {dtype} seq {seq}", half=[half])
