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
    table.update(get_decompositions([aten.upsample_bicubic2d]))
    for op in (aten.upsample_bilinear2d.default, aten.upsample_bilinear2d.vec, aten.upsample_bicubic2d.default,
               aten.upsample_bicubic2d.vec):
        if op in table:
            table[op] = _floats_only(table[op])
    if aten.repeat.default in table:
        table[aten.repeat.default] = _contiguous_first(table[aten.repeat.default])
    table[aten._trilinear.default] = _trilinear
    table[aten.addbmm.default] = _addbmm
    return table


# Torch has no decomposition of these two (AOTInductor calls ATen's kernels); both are matrix products in
# disguise, written here as the products the lowering already makes matmul kernels of.


def _trilinear(i1: torch.Tensor, i2: torch.Tensor, i3: torch.Tensor, expand1: list[int], expand2: list[int],
               expand3: list[int], sumdim: list[int], unroll_dim: int = 1) -> torch.Tensor:
    """nn.Bilinear's op: the three inputs, each unsqueezed at its `expand` dims, multiplied and summed over
    `sumdim`, as one einsum (torch contracts it pairwise through bmm)."""
    rank = i1.dim() + len(expand1)
    letters = "abcdefghijklmnopqrstuvwxyz"[:rank]
    terms = ["".join(letters[d] for d in range(rank) if d not in expand) for expand in (expand1, expand2, expand3)]
    nowhere = [d for d in range(rank) if all(d in e for e in (expand1, expand2, expand3))]  # of size 1
    kept = [d for d in range(rank) if d not in sumdim and d not in nowhere]
    out = torch.einsum(f"{','.join(terms)}->{''.join(letters[d] for d in kept)}", i1, i2, i3)
    for d in nowhere:
        if d not in sumdim:
            out = out.unsqueeze(sorted(k for k in range(rank) if k not in sumdim).index(d))
    return out


def _addbmm(x: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: float = 1,
            alpha: float = 1) -> torch.Tensor:
    """beta * x + alpha * (sum over b of batch1[b] @ batch2[b]): the batch folded into the inner dim, so one
    product of (n, b*k) by (b*k, p)."""
    if not batch1.is_floating_point():  # eager takes integer factors for integer tensors
        alpha, beta = int(alpha), int(beta)
    b, n, k = batch1.shape
    product = batch1.permute(1, 0, 2).reshape(n, b * k) @ batch2.reshape(b * k, batch2.shape[2])
    if alpha != 1:
        product = product * alpha
    if beta == 0:  # eager ignores x then, NaN included
        return product.expand(torch.broadcast_shapes(x.shape, product.shape)).clone()
    return product + (x if beta == 1 else x * beta)


def _contiguous_first(decomposition: Any) -> Any:
    """repeat of a permuted tensor: eager returns a contiguous tensor, torch's decomposition one in the input's
    stride order, so a .view after it (WavLM's position bias, modeling_wavlm.py:167) failed to decompose.
    The lowering is lazy: the copy this asks for fuses into the repeat's readers."""

    def decompose(x: Any, repeats: Any) -> Any:
        return decomposition(x.contiguous(), repeats)

    return decompose


def _floats_only(decomposition: Any) -> Any:
    """Integer inputs stay undecomposed, so the lowering reports the op unsupported: eager computes uint8
    bilinear and bicubic in fixed point and torch's decompositions differ from it by one in places."""

    def decompose(x: Any, *args: Any, **kwargs: Any) -> Any:
        return decomposition(x, *args, **kwargs) if x.is_floating_point() else NotImplemented

    return decompose
