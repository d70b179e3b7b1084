"""EmbeddingBag in each mode over a dynamic number of indices and bags: sums with per-sample weights, means
that skip a padding index, maxes, a last offset that ends the list, and fixed-size bags from a 2-d input.
Offsets carry meaning (sorted, from 0), so verification draws valid ones through `verification_inputs`;
tests/e2e/test_ops.py runs it through the C++ runtime and tests/codegen/test_triton_compile.py in the Triton
interpreter."""

import torch
from torch import nn


class Bags(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sum = nn.EmbeddingBag(50, 16, mode="sum")
        self.mean = nn.EmbeddingBag(50, 16, mode="mean", padding_idx=3)
        self.max = nn.EmbeddingBag(50, 16, mode="max")
        self.ended = nn.EmbeddingBag(50, 16, mode="sum", include_last_offset=True)

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor,
                fixed: torch.Tensor) -> tuple[torch.Tensor, ...]:
        end = offsets.new_full((1,), ids.shape[0])
        return (self.sum(ids, offsets, per_sample_weights=weights), self.mean(ids, offsets), self.max(ids, offsets),
                self.ended(ids, torch.cat([offsets, end])), self.mean(fixed), self.max(fixed))


def model() -> nn.Module:
    return Bags()


def bags_at(n: int, b: int, rows: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Valid inputs: n ids (padding ones among them), b sorted offsets from 0 (empty bags among them)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 50, (n,), generator=gen)
    ids[torch.rand(n, generator=gen) < 0.2] = 3
    starts = torch.sort(torch.randint(0, n + 1, (b - 1,), generator=gen)).values
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), starts])
    return ids, offsets, torch.rand(n, generator=gen) * 2 - 0.5, torch.randint(0, 50, (rows, 5), generator=gen)


def verification_inputs(sizes: dict[str, int], seed: int) -> tuple[torch.Tensor, ...]:
    return bags_at(sizes["n"], sizes["b"], sizes["rows"], seed)


example_inputs = bags_at(12, 4, 4, 0)
dynamic_axes = {"ids": {0: "n"}, "offsets": {0: "b"}, "weights": {0: "n"}, "fixed": {0: "rows"}}
dynamic_ranges = {"n": (1, 64), "b": (1, 16), "rows": (1, 8)}
