"""exporter.min_max: torch 2.13's Min/Max rule for multiples of one term, added during capture where missing."""

from __future__ import annotations

import sympy
import torch
from aotpack.exporter.min_max import collapse_multiples, simplified_min_max


def test_multiples_of_a_nonnegative_term():
    s = sympy.Symbol("s", positive=True, integer=True)
    assert collapse_multiples("Min", 16 * s, 32 * s) == 16 * s
    assert collapse_multiples("Min", 32 * s, 16 * s) == 16 * s
    assert collapse_multiples("Max", 16 * s, 32 * s) == 32 * s
    assert collapse_multiples("Min", 4 * s, 4 * s) == 4 * s


def test_a_nonpositive_term_reverses_the_order():
    n = sympy.Symbol("n", nonpositive=True)
    assert collapse_multiples("Min", 2 * n, 3 * n) == 3 * n
    assert collapse_multiples("Max", 2 * n, 3 * n) == 2 * n


def test_undecided_cases_are_left_alone():
    s, t = sympy.symbols("s t", positive=True, integer=True)
    x = sympy.Symbol("x", real=True)  # sign unknown
    assert collapse_multiples("Min", 16 * s, 32 * t) is None
    assert collapse_multiples("Min", 2 * x, 3 * x) is None
    assert collapse_multiples("Min", 2 * s + 1, 3 * s) is None


def test_sym_min_of_multiples_is_one_side_inside_the_context():
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, statically_known_true

    env = ShapeEnv()
    s = env.create_symintnode(env.create_symbol(16, ConstantSource("s"), dynamic_dim=DimDynamic.DYNAMIC), hint=16)
    with simplified_min_max():
        smallest = torch.sym_min(16 * s, 32 * s)
        largest = torch.sym_max(16 * s, 32 * s)
    assert statically_known_true(smallest == 16 * s) and statically_known_true(largest == 32 * s)


def test_context_restores_torch_and_nests():
    from torch.utils._sympy.functions import MinMaxBase

    before = MinMaxBase.__dict__["_find_localzeros"]
    with simplified_min_max(), simplified_min_max():
        pass
    assert MinMaxBase.__dict__["_find_localzeros"] is before
    assert not hasattr(MinMaxBase, "_aotpack_original_find_localzeros")


def test_leaving_the_context_restores_the_unbound_classmethod(monkeypatch):
    """Two captures in a row: after each, the subclasses' calls must again get their own class (restoring a
    method bound to the base made every later Min/Max fail with "impossible MinMaxBase" under torch 2.11)."""
    from aotpack.exporter import min_max

    class Base:
        @classmethod
        def _find_localzeros(cls, values, **options):
            return {cls.__name__}

    class Min(Base):
        pass

    original = Base.__dict__["_find_localzeros"]
    monkeypatch.setattr(min_max, "_min_max_base", lambda: Base)
    for _ in range(2):
        with simplified_min_max():
            assert Min._find_localzeros(()) == {"Min"}
        assert Base.__dict__["_find_localzeros"] is original
        assert Min._find_localzeros(()) == {"Min"}
