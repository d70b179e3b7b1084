"""ir.symbolic.settled: Max and Min in sizes resolved where the declared ranges decide them."""

from __future__ import annotations

import sympy
from aotpack.lowering.ir.symbolic import settled, size_symbol
from torch.utils._sympy.functions import Max, Min

n, m = size_symbol("n"), size_symbol("m")
RANGES = {n: (1, 256), m: (4, 8)}


def test_a_size_that_is_one_value_over_the_ranges_becomes_that_value():
    assert settled(1 - Max(0, 1 - n), RANGES) == 1  # HF MPT's ALiBi slice of a size-1 dim
    assert settled(n + 3 * Max(0, 2 - m), RANGES) == n
    assert settled(sympy.Max(0, 1 - n), RANGES) == 0  # sympy's own Max too


def test_arguments_the_ranges_order_are_dropped():
    assert settled(Min(n, 300), RANGES) == n
    assert settled(Min(m, n + 10), RANGES) == m
    assert settled(Max(m, 2, n), RANGES) == Max(m, n)


def test_what_the_ranges_leave_open_is_kept():
    assert settled(Max(0, n - 4), RANGES) == Max(0, n - 4)
    assert settled(Min(m, n), RANGES) == Min(m, n)
    assert settled(2 * n + 1, RANGES) == 2 * n + 1
