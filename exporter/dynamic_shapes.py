"""torch.export's `dynamic_shapes` as aotpack's named symbols.

Two spellings are taken, per input and axis, in a dict keyed by forward-argument name or a tuple by position:
- `torch.export.Dim("seq", min=1, max=2048)`: the Dim's name becomes the package's symbol, its bounds the range;
- `"seq"`: aotpack's own form, the range coming from `ranges` (model.py's `dynamic_ranges`, or `--dynamic`).
An axis may also be None (static). Each input's value is a dict {axis: ...}, a tuple with one entry per axis,
or None. The result is model.py's `dynamic_axes` and `dynamic_ranges`, so everything downstream is the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import DynamicShapeError

_FORM = 'e.g. dynamic_shapes = {"x": {0: Dim("batch", min=1, max=64)}}'


def from_dynamic_shapes(value: Any, names: Sequence[str], where: str) -> tuple[dict[str, dict[int, str]],
                                                                               dict[str, tuple[int, int]]]:
    """(dynamic_axes, the ranges the Dims carry) from a `dynamic_shapes` value; `where` names it in errors."""
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in names]
        if unknown:
            raise DynamicShapeError(f"{where} names {unknown[0]!r}, which is not an input of forward(); the inputs "
                                    f"are: {', '.join(names)}")
        per_input = dict(value)
    elif isinstance(value, (tuple, list)):
        if len(value) != len(names):
            raise DynamicShapeError(f"{where} has {len(value)} entries but forward() takes {len(names)} inputs "
                                    f"({', '.join(names)}); give one per input (None for a static one)")
        per_input = dict(zip(names, value))
    else:
        raise DynamicShapeError(f"{where} is a {type(value).__name__}; it must be a dict or a tuple, {_FORM}")
    axes: dict[str, dict[int, str]] = {}
    ranges: dict[str, tuple[int, int]] = {}
    for arg, spec in per_input.items():
        if spec is None:
            continue
        if isinstance(spec, Mapping):
            items = list(spec.items())
        elif isinstance(spec, (tuple, list)):
            items = list(enumerate(spec))
        else:
            raise DynamicShapeError(f"{where}[{arg!r}] is a {type(spec).__name__}; give {{axis: Dim(...)}}, {_FORM}")
        bound: dict[int, str] = {}
        for axis, dim in items:
            if dim is None or _is_static_hint(dim):
                continue
            name = _symbol(dim, f"{where}[{arg!r}][{axis}]", ranges)
            bound[axis] = name
        if bound:
            axes[arg] = bound
    return axes, ranges


def _symbol(dim: Any, where: str, ranges: dict[str, tuple[int, int]]) -> str:
    if isinstance(dim, str):
        return dim
    kind = type(dim).__name__
    if kind == "_DerivedDim":
        raise DynamicShapeError(f"{where} is the derived dimension {dim.__name__}; aotpack binds each axis to a "
                                "symbol of its own: give that axis Dim(...) of its own, or make it static")
    if kind == "_DimHint":
        raise DynamicShapeError(f"{where} is {dim}; aotpack plans memory for declared maxima, so each dynamic axis "
                                'needs a named range: Dim("seq", min=1, max=2048)')
    name, lo, hi = getattr(dim, "__name__", None), getattr(dim, "min", None), getattr(dim, "max", None)
    if not isinstance(name, str) or lo is None or hi is None:
        raise DynamicShapeError(f"{where} is {dim!r}; expected torch.export.Dim(name, min=..., max=...), a symbol "
                                f"name, or None, {_FORM}")
    try:
        lo, hi = int(lo), int(hi)
    except Exception:  # noqa: BLE001 - torch's int_oo fails int() with errors that differ across sympy versions
        raise DynamicShapeError(f"{where}: Dim {name!r} has no finite max ({dim.max}); aotpack plans memory for the "
                                f'maximum, so give one: Dim("{name}", min={lo}, max=...)') from None
    if hi > 2**62:
        raise DynamicShapeError(f"{where}: Dim {name!r} has no finite max; aotpack plans memory for the maximum, so "
                                f'give one: Dim("{name}", min={lo}, max=...)')
    if ranges.get(name, (lo, hi)) != (lo, hi):
        raise DynamicShapeError(f"{where}: Dim {name!r} is given the ranges {ranges[name][0]}..{ranges[name][1]} and "
                                f"{lo}..{hi}; one symbol has one range")
    ranges[name] = (lo, hi)
    return name


def _is_static_hint(dim: Any) -> bool:
    return type(dim).__name__ == "_DimHint" and "STATIC" in str(dim)
