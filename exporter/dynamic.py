"""Named dynamic dimensions: parsing `--dynamic NAME=MIN..MAX`, checking them against model.py's bindings and
example inputs, and turning them into torch.export's `dynamic_shapes`.

A declared range is exactly what the package accepts. torch.export specialises sizes 0 and 1, so an example
of size 0 or 1 on a dynamic axis is enlarged to 2 for capture (see capture_examples); the range handed to
torch.export.Dim is the real one, min=1 included, and torch keeps it in range_constraints.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch.export import Dim

from ..errors import DynamicShapeError
from .model_file import ModelSpec

_SPEC = re.compile(r"^\s*(?P<name>[^=\s]+)\s*=\s*(?P<min>-?\d+)\s*\.\.\s*(?P<max>-?\d+)\s*$")
_FORM = "expected NAME=MIN..MAX, e.g. --dynamic seq=1..2048"


def inner_value(lo: int, hi: int) -> int:
    """A size strictly inside lo..hi, away from the powers of two that block sizes divide evenly."""
    return lo + (hi - lo) * 3 // 7 + 1 if hi - lo >= 2 else hi


@dataclass(frozen=True)
class SymbolSpec:
    name: str
    min: int
    max: int  # inclusive

    @property
    def is_static(self) -> bool:
        # torch.export.Dim refuses min == max: such a "symbol" is one fixed size, captured as a constant.
        return self.min == self.max

    def __str__(self) -> str:
        return f"{self.name}={self.min}..{self.max}"


class DynamicPlan(NamedTuple):
    symbols: tuple[SymbolSpec, ...]
    dynamic_shapes: dict[str, dict[int, Any] | None] | None  # None: every shape static
    notes: tuple[str, ...]


def parse_dynamic_specs(specs: Iterable[str]) -> dict[str, tuple[int, int]]:
    """`["seq=1..2048", "batch=1..8"]` -> `{"seq": (1, 2048), "batch": (1, 8)}` (repeatable CLI option)."""
    ranges: dict[str, tuple[int, int]] = {}
    for spec in specs:
        match = _SPEC.match(spec)
        if match is None:
            raise DynamicShapeError(f"--dynamic {spec!r}: {_FORM}")
        name = match["name"]
        if not name.isidentifier():
            raise DynamicShapeError(f"--dynamic {spec!r}: {name!r} is not a valid symbol name; {_FORM}")
        if name in ranges:
            raise DynamicShapeError(f"--dynamic gives {name} twice; give each symbol one range")
        ranges[name] = (int(match["min"]), int(match["max"]))
    return ranges


def resolve_symbols(spec: ModelSpec, cli_ranges: Mapping[str, tuple[int, int]] | None = None) -> DynamicPlan:
    """Merge model.py's default ranges with the CLI's (the CLI wins), validate, and build torch's
    dynamic_shapes. With no range anywhere the export is static, whatever dynamic_axes binds."""
    ranges = {**spec.dynamic_ranges, **(cli_ranges or {})}
    if not ranges:
        notes = ()
        unbound = sorted({s for axes in spec.dynamic_axes.values() for s in axes.values()})
        if unbound:  # a model.py may list its inputs with no dynamic axis at all: nothing to say then
            note = (
                f"static shapes: no range given for {', '.join(unbound)} "
                f"(make them dynamic with --dynamic {unbound[0]}=MIN..MAX)"
            )
            notes = (note,)
        return DynamicPlan((), None, notes)

    symbols = tuple(_check_range(name, lo, hi) for name, (lo, hi) in ranges.items())
    by_name = {s.name: s for s in symbols}
    bindings = _bindings(spec)  # symbol -> [(input, axis)]

    for s in symbols:
        if s.name not in bindings:
            bound = ", ".join(sorted(bindings)) or "none (model.py defines no dynamic_axes)"
            raise DynamicShapeError(
                f"symbol {s.name} has a range but is bound to no input axis; the bound symbols are: {bound}"
            )
    for name, places in bindings.items():
        if name not in by_name:
            arg, axis = places[0]
            raise DynamicShapeError(
                f"symbol {name} (input {arg!r} axis {axis}) has no range; "
                f"give one with --dynamic {name}=MIN..MAX or in dynamic_ranges"
            )
    _check_examples(spec, by_name, bindings)

    notes = []
    dims = {}
    for s in symbols:
        if s.is_static:
            notes.append(f"{s.name} has the range {s.min}..{s.max}: captured as the fixed size {s.min}")
        else:
            dims[s.name] = Dim(s.name, min=s.min, max=s.max)
    shapes: dict[str, dict[int, Any] | None] = {}
    for arg in spec.input_names:
        axes = {axis: dims[sym] for axis, sym in spec.dynamic_axes.get(arg, {}).items() if sym in dims}
        shapes[arg] = axes or None
    dynamic_shapes = shapes if dims else None
    return DynamicPlan(symbols, dynamic_shapes, tuple(notes))


def _check_range(name: str, lo: int, hi: int) -> SymbolSpec:
    if lo < 0:
        raise DynamicShapeError(f"symbol {name}: min {lo} is negative; sizes start at 0")
    if lo > hi:
        raise DynamicShapeError(f"symbol {name}: min {lo} is greater than max {hi}; write {name}={hi}..{lo}?")
    if hi == 1 and lo == 0:
        # torch.export cannot keep a dimension dynamic unless its range holds a size it does not specialise.
        raise DynamicShapeError(
            f"symbol {name}: the range 0..1 is too small to capture as dynamic; torch.export specialises "
            "sizes 0 and 1, so a dynamic range must include 2"
        )
    return SymbolSpec(name, lo, hi)


def _bindings(spec: ModelSpec) -> dict[str, list[tuple[str, int]]]:
    bindings: dict[str, list[tuple[str, int]]] = {}
    for arg in spec.input_names:
        for axis, sym in sorted(spec.dynamic_axes.get(arg, {}).items()):
            bindings.setdefault(sym, []).append((arg, axis))
    return bindings


def _check_examples(
    spec: ModelSpec, symbols: Mapping[str, SymbolSpec], bindings: Mapping[str, list[tuple[str, int]]]
) -> None:
    examples = dict(zip(spec.input_names, spec.example_inputs))
    for name, places in bindings.items():
        s = symbols[name]
        first: tuple[str, int, int] | None = None
        for arg, axis in places:
            size = examples[arg].shape[axis]
            if not s.min <= size <= s.max:
                raise DynamicShapeError(
                    f"example input {arg!r} axis {axis} ({name}) has size {size}, outside {name}'s range "
                    f"{s.min}..{s.max}; change the example or the range"
                )
            if first is None:
                first = (arg, axis, size)
            elif size != first[2]:
                raise DynamicShapeError(
                    f"symbol {name} is bound to input {first[0]!r} axis {first[1]} (example size {first[2]}) "
                    f"and input {arg!r} axis {axis} (example size {size}); axes sharing a symbol must have "
                    "equal example sizes"
                )


def capture_examples(
    spec: ModelSpec, symbols: Iterable[SymbolSpec]
) -> tuple[tuple[torch.Tensor, ...], tuple[str, ...]]:
    """The inputs torch.export traces with. An example size of 0 or 1 on a dynamic axis would make torch
    specialise that axis, so it is enlarged to 2 (repeating the data, or zeros for an empty axis); the declared
    range is untouched. An example sharing memory with an earlier one (model(x, x)) is traced as a copy: torch.export
    would take the two arguments for one tensor, and the package would then read only one of them. Returns the
    inputs and a note for each change."""
    dynamic = {s.name: s for s in symbols if not s.is_static}
    inputs = []
    notes = []
    for arg, tensor in zip(spec.input_names, spec.example_inputs):
        for axis, sym in sorted(spec.dynamic_axes.get(arg, {}).items()):
            s = dynamic.get(sym)
            size = tensor.shape[axis]
            if s is None or size >= 2 or not s.min <= 2 <= s.max:
                continue
            if size == 1:
                tensor = torch.cat([tensor, tensor], dim=axis)
            else:
                shape = list(tensor.shape)
                shape[axis] = 2
                tensor = tensor.new_zeros(shape)
            notes.append(
                f"input {arg!r} axis {axis} ({sym}): the example has size {size}, which torch.export would "
                f"treat as a constant; traced with size 2 instead (the range {s.min}..{s.max} is kept)"
            )
        owner = _shares_memory_with(tensor, inputs)
        if owner is not None:
            tensor = tensor.clone()
            notes.append(f"input {arg!r} shares memory with input {spec.input_names[owner]!r} in the examples; traced "
                         "as a tensor of its own, as the package takes it")
        inputs.append(tensor)
    return tuple(inputs), tuple(notes)


def _shares_memory_with(tensor: torch.Tensor, earlier: list[torch.Tensor]) -> int | None:
    """The index of an earlier example whose storage `tensor` shares, if any."""
    if tensor.numel() == 0:
        return None
    storage = tensor.untyped_storage().data_ptr()
    for i, other in enumerate(earlier):
        if other.numel() and other.untyped_storage().data_ptr() == storage:
            return i
    return None
