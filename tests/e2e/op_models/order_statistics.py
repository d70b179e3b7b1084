"""Order statistics over a dynamic row length: the median (with NaN: the first NaN; nanmedian past them), the
k-th value, running max and min with their positions, logcumsumexp, and bucketing against a sorted buffer of
edges and searching a sorted input (eager's binary search, so random unsorted rows agree too). Run by
tests/e2e/test_ops.py through the C++ runtime and by tests/codegen/test_triton_compile.py in the Triton
interpreter."""

import torch
from torch import nn


class OrderStatistics(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("edges", torch.linspace(-2.0, 2.0, 11))

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, ...]:
        holes = x.masked_fill(x > 1.6, float("nan"))
        return (*torch.median(holes, 1), *torch.nanmedian(holes, 1), torch.kthvalue(x, 2, 1).values,
                torch.median(x), *torch.cummax(holes, 1), *torch.cummin(x, 0), torch.logcumsumexp(x, 1),
                torch.bucketize(x, self.edges), torch.bucketize(x, self.edges, right=True, out_int32=True),
                torch.searchsorted(table, x[:, :4].contiguous(), side="right"))


def model() -> nn.Module:
    return OrderStatistics()


example_inputs = (torch.randn(3, 12), torch.sort(torch.randn(3, 5)).values)
dynamic_axes = {"x": {0: "batch", 1: "n"}, "table": {0: "batch"}}
dynamic_ranges = {"batch": (1, 4), "n": (5, 40)}  # at n = 4 the searched slice is contiguous: a guard
