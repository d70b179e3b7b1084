"""Where a package is verified: the points of its declared ranges, and the inputs made for each.

The points are the example shapes, every symbol at its minimum, every symbol at its maximum, every symbol at
an inner value, and, with several symbols, the two mixed corners (alternating minima and maxima). They are a
pure function of the signature and the examples, so the same export verifies at the same points everywhere
and the package stays byte-reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..exporter.dynamic import inner_value
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
