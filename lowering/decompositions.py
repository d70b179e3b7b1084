"""ATen ops the lowering wants decomposed before it sees the graph, on top of torch's core ATen set.

Each of these is expressible with ops the lowering already has (softmax = amax, exp, sum, div), so
decomposing them gives fusion for free instead of a template per op.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

_DECOMPOSED = [
    "_softmax", "_log_softmax", "gelu", "silu", "mish", "softplus", "elu", "leaky_relu", "hardtanh", "hardsigmoid",
    "hardswish", "var", "var_mean", "std", "native_layer_norm", "native_group_norm",
    "addmm", "logsumexp",
    "linalg_vector_norm", "norm", "rsub", "sigmoid_backward", "squeeze", "baddbmm", "addcmul", "addcdiv",
    "logaddexp", "_safe_softmax", "glu", "celu", "selu", "threshold", "rms_norm", "_fused_rms_norm",
    "nll_loss_forward", "smooth_l1_loss", "mse_loss", "xlogy", "index_add", "masked_fill", "frac", "heaviside",
    "logical_xor", "deg2rad", "rad2deg", "sinc", "softshrink", "hardshrink", "roll", "repeat", "narrow",
    "diag_embed", "tril", "triu", "_unsafe_index", "im2col", "upsample_nearest2d", "upsample_bilinear2d",
]


def decompositions() -> dict[Any, Any]:
    ops = [getattr(aten, name) for name in _DECOMPOSED if hasattr(aten, name)]
    return get_decompositions(ops)
