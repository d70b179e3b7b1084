"""ATen ops the lowering wants decomposed before it sees the graph, on top of torch's core ATen set.

Each of these is expressible with ops the lowering already has (softmax = amax, exp, sum, div), so
decomposing them gives fusion for free instead of a template per op.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

# Not addmm: torch's decomposition computes half-precision addmm in float32 (pw_cast_for_opmath), so a bf16
# linear layer would become a float32 matmul over upcast copies; ops_linalg lowers addmm in the model's dtype.
_DECOMPOSED = [
    "_softmax", "_log_softmax", "gelu", "silu", "mish", "softplus", "elu", "leaky_relu", "hardtanh", "hardsigmoid",
    "hardswish", "var", "var_mean", "std", "native_layer_norm", "native_group_norm",
    "logsumexp",
    "linalg_vector_norm", "norm", "rsub", "sigmoid_backward", "squeeze", "baddbmm", "addcmul", "addcdiv",
    "logaddexp", "_safe_softmax", "glu", "celu", "selu", "threshold", "rms_norm", "_fused_rms_norm",
    "nll_loss_forward", "smooth_l1_loss", "mse_loss", "xlogy", "index_add", "masked_fill", "frac", "heaviside",
    "logical_xor", "deg2rad", "rad2deg", "sinc", "softshrink", "hardshrink", "roll", "repeat", "narrow",
    "diag_embed", "tril", "triu", "_unsafe_index", "im2col", "upsample_nearest2d", "upsample_bilinear2d",
    # op_db coverage (bench/coverage.py): views through as_strided, scatters into slices, small compositions
    "diagonal", "diagonal_copy", "diagonal_scatter", "slice_scatter", "select_scatter", "narrow_copy", "unfold",
    "addmv", "dist", "round", "ldexp", "trace",
]

# Ops the lowering has a fused kernel for, kept out of torch's default table (None: do not decompose).
# sdpa as torch.export records it on CPU: lowering/frontend/ops/attention.py, one pass with no stored scores.
_KEPT_WHOLE = ["_scaled_dot_product_flash_attention_for_cpu"]


def decompositions() -> dict[Any, Any]:
    """The lowering's table on top of torch's: op -> decomposition, or None for an op it must see whole."""
    ops = [getattr(aten, name) for name in _DECOMPOSED if hasattr(aten, name)]
    table = get_decompositions(ops)
    for name in _KEPT_WHOLE:
        if hasattr(aten, name):
            table[getattr(aten, name).default] = None
    for op in (aten.upsample_bilinear2d.default, aten.upsample_bilinear2d.vec):
        if op in table:
            table[op] = _floats_only(table[op])
    return table


def _floats_only(decomposition: Any) -> Any:
    """Integer inputs stay undecomposed, so the lowering reports the op unsupported: eager computes uint8
    bilinear in fixed point and torch's float decomposition differs from it by one in places."""

    def decompose(x: Any, *args: Any, **kwargs: Any) -> Any:
        return decomposition(x, *args, **kwargs) if x.is_floating_point() else NotImplemented

    return decompose
