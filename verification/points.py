"""Where a package is verified: the points of its declared ranges, and the inputs made for each.

The points are the example shapes, every symbol at its minimum, every symbol at its maximum, every symbol at
an inner value, and, with several symbols, the two mixed corners (alternating minima and maxima). They are a
pure function of the signature and the examples, so the same export verifies at the same points everywhere
and the package stays byte-reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ModelFileError
from ..exporter.dynamic import inner_value
from ..exporter.frames import one_line
from ..packages.program import evaluate_size


@dataclass(frozen=True)
class Point:
    label: str  # example, min, max, inner, mixed
    symbols: Mapping[str, int]

    def describe(self) -> str:
        values = " ".join(f"{k}={v}" for k, v in self.symbols.items()) or "static shapes"
        return f"{values} ({self.label})"


def range_points(symbols: Sequence[Mapping[str, Any]], example: Mapping[str, int]) -> list[Point]:
    """The points for `mode="range"`, duplicates dropped (the first label kept)."""
    if not symbols:
        return [Point("example", {})]
    names = [s["name"] for s in symbols]
    candidates = [
        Point("example", {n: example[n] for n in names}),
        Point("min", {s["name"]: s["min"] for s in symbols}),
        Point("max", {s["name"]: s["max"] for s in symbols}),
        Point("inner", {s["name"]: inner_value(s["min"], s["max"]) for s in symbols}),
    ]
    if len(symbols) > 1:
        candidates.append(Point("mixed", {s["name"]: (s["max"] if i % 2 else s["min"]) for i, s in enumerate(symbols)}))
        candidates.append(Point("mixed", {s["name"]: (s["min"] if i % 2 else s["max"]) for i, s in enumerate(symbols)}))
    seen: set[tuple[tuple[str, int], ...]] = set()
    points = []
    for p in candidates:
        key = tuple(p.symbols.items())
        if key not in seen:
            seen.add(key)
            points.append(p)
    return points


def example_symbols(signature: Mapping[str, Any], examples: Sequence[torch.Tensor]) -> dict[str, int]:
    """The symbols' values at the example inputs' shapes."""
    values: dict[str, int] = {}
    for info, x in zip(signature["inputs"], examples):
        for dim, size in zip(info["shape"], x.shape):
            if isinstance(dim, str):
                values.setdefault(dim, int(size))
    return values


def inputs_at(signature: Mapping[str, Any], examples: Sequence[torch.Tensor], point: Point,
              seed: int) -> list[torch.Tensor]:
    """Inputs of the point's shapes. Floats are drawn fresh from `seed`. Integer and boolean inputs (token ids,
    positions, masks) carry meaning a random draw would break, so they are the examples' values repeated
    cyclically along each axis to the new size (cut where it is smaller): valid ids stay valid ids."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for info, example in zip(signature["inputs"], examples):
        shape = [evaluate_size(d, point.symbols) for d in info["shape"]]
        if example.is_floating_point():
            out.append(torch.randn(shape, generator=gen).to(example.dtype))
        else:
            out.append(_tiled(example, shape))
    return out


def made_inputs(make: Callable[[dict[str, int], int], Any], signature: Mapping[str, Any],
                examples: Sequence[torch.Tensor], point: Point, seed: int) -> list[torch.Tensor]:
    """The model's own inputs at the point (its verification_inputs), checked against the package's signature
    there and cast to the examples' floating dtype (a --dtype export's)."""
    sizes = dict(point.symbols)
    call = f"verification_inputs({sizes}, {seed})"
    try:
        made = make(dict(sizes), seed)
    except Exception as e:
        raise ModelFileError(f"{call} raised {type(e).__name__}: {one_line(str(e))}") from e
    made = (made,) if isinstance(made, torch.Tensor) else made
    if not isinstance(made, (tuple, list)) or len(made) != len(examples):
        got = f"{len(made)} values" if isinstance(made, (tuple, list)) else type(made).__name__
        raise ModelFileError(f"{call} returned {got}; expected a tuple of {len(examples)} tensors, one per "
                             "forward() input")
    out = []
    for info, example, x in zip(signature["inputs"], examples, made):
        shape = [evaluate_size(d, point.symbols) for d in info["shape"]]
        if not isinstance(x, torch.Tensor) or list(x.shape) != shape:
            got = f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise ModelFileError(f"{call} gave input {info['name']!r} {got}; at these sizes it must have shape "
                                 f"{tuple(shape)}")
        if x.is_floating_point() != example.is_floating_point() or (
                not x.is_floating_point() and x.dtype != example.dtype):
            raise ModelFileError(f"{call} gave input {info['name']!r} of dtype {x.dtype}; the package takes "
                                 f"{example.dtype}")
        out.append(x.to(example.dtype).contiguous())
    return out


def _tiled(example: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    x = example
    for axis, size in enumerate(shape):
        if x.shape[axis] == size:
            continue
        if x.shape[axis] == 0:
            new_shape = list(x.shape)
            new_shape[axis] = size
            x = x.new_zeros(new_shape)
        else:
            x = x.index_select(axis, torch.arange(size) % x.shape[axis])
    return x.contiguous()
