"""Min and max of sizes that differ by a constant factor, simplified as torch 2.13 does, for older torch.

Non-strict torch.export replaces the builtins `min`/`max` with `torch.sym_min`/`sym_max` while it traces, so
torch's own shape code (`_collapse_view_helper` in torch/_prims, reached by any `reshape` that merges
dimensions) builds `Min(16*seq, 32*seq)` as an expression instead of comparing the two. torch 2.13 reduces
that to `16*seq` when it builds it (`MinMaxBase._collapse_known_multiplicative_terms`); torch 2.11 keeps the
`Min`, and its range analysis, which bounds each side separately, cannot prove the guard
`Min(16*seq, 32*seq) == 16*seq` that a later contiguity check adds, so export refuses to keep `seq` dynamic.
Transformers' grouped-query attention (`repeat_kv`: expand, then reshape) hits this in every Llama-like model.

`simplified_min_max()` adds the same rule to torch's `Min`/`Max` for the duration of a capture where torch
lacks it: with `c1*t` and `c2*t`, numbers c1, c2 and `t` known non-negative (sizes are), the smaller
coefficient is the minimum. It is exact algebra, so no guard is lost, only proved.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_depth = 0
# torch's own `_find_localzeros` while ours is installed: the classmethod object from the class's __dict__.
# (Read back as a class attribute it would come out bound to MinMaxBase, and restoring that would make every
# later Min/Max call run with cls=MinMaxBase: torch then fails with "impossible MinMaxBase".)
_saved: Any = None


@contextlib.contextmanager
def simplified_min_max() -> Iterator[None]:
    global _depth, _saved
    base = _min_max_base()
    if base is None or hasattr(base, "_collapse_known_multiplicative_terms"):
        yield  # torch 2.13 and later have the rule; a torch with another layout is left alone
        return
    with _lock:
        if _depth == 0:
            _saved = base.__dict__["_find_localzeros"]
            base._find_localzeros = classmethod(_with_collapse(_saved.__func__))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                base._find_localzeros = _saved
                _saved = None


def _min_max_base() -> Any:
    try:
        from torch.utils._sympy.functions import MinMaxBase  # private; present since torch 2.4
    except ImportError:
        return None
    find = MinMaxBase.__dict__.get("_find_localzeros")
    return MinMaxBase if isinstance(find, classmethod) else None


def _with_collapse(original: Any) -> Any:
    def find_localzeros(cls: Any, values: Any, **options: Any) -> Any:
        found = original(cls, values, **options)
        if len(found) == 2 and not any(v.is_Number for v in found):
            collapsed = collapse_multiples(cls.__name__, *found)
            if collapsed is not None:
                return {collapsed}
        return found

    return find_localzeros


def collapse_multiples(kind: str, a: Any, b: Any) -> Any:
    """Min/Max ("Min" or "Max") of sympy expressions `c1*t` and `c2*t` as one of them when the order of the
    coefficients and the sign of `t` settle it, else None (torch 2.13's `_collapse_known_multiplicative_terms`)."""
    a_coeff, a_term = a.as_coeff_Mul()
    b_coeff, b_term = b.as_coeff_Mul()
    if a_term != b_term or not (a_coeff.is_comparable and b_coeff.is_comparable):
        return None
    if a_coeff == b_coeff:
        return a
    if a_term.is_nonnegative:
        a_smaller = bool(a_coeff < b_coeff)
    elif a_term.is_nonpositive:
        a_smaller = bool(a_coeff > b_coeff)
    else:
        return None
    if kind == "Min":
        return a if a_smaller else b
    return b if a_smaller else a
