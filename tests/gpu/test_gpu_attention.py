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
from test_attention import HERE, _pad, attention_model

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
