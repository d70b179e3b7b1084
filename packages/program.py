"""program.json, the execution plan: its schema, writer and reader (docs/package-format.md, "program.json").

The compiler hands this module plain data (ints, strings, size expressions already in the runtime's JSON
form, see lowering/codegen/printer.py); nothing here knows about torch or sympy. The schema is versioned
with the package format: a change to it bumps `layout.FORMAT_VERSION`, which the manifest records, so
program.json itself carries no version of its own.

A target that needs more than the CPU's plain step list (CUDA: launch grids, error messages) adds a
section under its kind (`"cuda": {...}`), which its compiler backend writes and the runtime's backend
reads; `steps` stays the CPU's, or on a package without a CPU target the first target's, so a runtime
without that target still parses the program and then refuses the package for lacking a CPU target.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import AotpackError
from . import layout

SCHEMA_VERSION = layout.FORMAT_VERSION
BUFFER_KINDS = ("input", "weight", "arena", "output")


class ProgramError(AotpackError):
    """A program.json that does not follow the schema; the message gives the JSON path."""


@dataclass(frozen=True)
class SymbolEntry:
    name: str
    min: int
    max: int


@dataclass(frozen=True)
class Binding:
    """A named input or output and the buffer that holds it."""

    name: str
    buffer: int


@dataclass(frozen=True)
class BufferEntry:
    """One buffer. `place` is what its kind needs: input -> {"input": i}, weight -> {"weight": name},
    arena -> {"offset", "max_bytes"}, output -> {"output": i, "max_bytes"}."""

    id: int
    kind: str
    dtype: str
    shape: tuple[Any, ...]  # size expressions in JSON form
    place: dict[str, Any]


@dataclass(frozen=True)
class StepEntry:
    kernel: str
    args: tuple[int, ...]  # buffer ids


@dataclass(frozen=True)
class ProgramDoc:
    symbols: tuple[SymbolEntry, ...]
    inputs: tuple[Binding, ...]
    outputs: tuple[Binding, ...]
    buffers: tuple[BufferEntry, ...]
    arena_bytes: int
    steps: tuple[StepEntry, ...]
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)  # target kind -> its own section


def step_json(step: StepEntry) -> dict[str, Any]:
    return {"kernel": step.kernel, "args": list(step.args)}


def program_json(doc: ProgramDoc) -> dict[str, Any]:
    """The JSON value of program.json (packages/writer.canonical_json makes its bytes)."""
    return {
        "symbols": [{"name": s.name, "min": s.min, "max": s.max} for s in doc.symbols],
        "inputs": [{"name": b.name, "buffer": b.buffer} for b in doc.inputs],
        "outputs": [{"name": b.name, "buffer": b.buffer} for b in doc.outputs],
        "buffers": [{"id": b.id, "kind": b.kind, "dtype": b.dtype, "shape": list(b.shape), **b.place}
                    for b in doc.buffers],
        "arena_bytes": doc.arena_bytes,
        "steps": [step_json(s) for s in doc.steps],
        **doc.sections,
    }


def read_program(value: Any) -> ProgramDoc:
    """program.json's value checked against the schema (the runtime validates it again, in C++)."""

    def need(obj: Any, key: str, kind: type, where: str) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise ProgramError(f"program.json: {where}.{key} is missing")
        if not isinstance(obj[key], kind) or (kind is int and isinstance(obj[key], bool)):
            raise ProgramError(f"program.json: {where}.{key} should be a {kind.__name__}")
        return obj[key]

    def items(key: str) -> list[Any]:
        return need(value, key, list, "$")

    symbols = tuple(SymbolEntry(need(s, "name", str, f"$.symbols[{i}]"), need(s, "min", int, f"$.symbols[{i}]"),
                                need(s, "max", int, f"$.symbols[{i}]")) for i, s in enumerate(items("symbols")))
    bindings = {key: tuple(Binding(need(b, "name", str, f"$.{key}[{i}]"), need(b, "buffer", int, f"$.{key}[{i}]"))
                           for i, b in enumerate(items(key))) for key in ("inputs", "outputs")}
    buffers = []
    for i, b in enumerate(items("buffers")):
        where = f"$.buffers[{i}]"
        kind = need(b, "kind", str, where)
        if kind not in BUFFER_KINDS:
            raise ProgramError(f"program.json: {where}.kind is {kind!r}, not one of {', '.join(BUFFER_KINDS)}")
        place = {k: v for k, v in b.items() if k not in ("id", "kind", "dtype", "shape")}
        buffers.append(BufferEntry(need(b, "id", int, where), kind, need(b, "dtype", str, where),
                                   tuple(need(b, "shape", list, where)), place))
    steps = tuple(StepEntry(need(s, "kernel", str, f"$.steps[{i}]"), tuple(need(s, "args", list, f"$.steps[{i}]")))
                  for i, s in enumerate(items("steps")))
    known = {"symbols", "inputs", "outputs", "buffers", "arena_bytes", "steps"}
    sections = {k: v for k, v in value.items() if k not in known}
    return ProgramDoc(symbols, bindings["inputs"], bindings["outputs"], tuple(buffers),
                      need(value, "arena_bytes", int, "$"), steps, sections)


def evaluate_size(dim: Any, symbols: Mapping[str, int]) -> int:
    """A size in program.json's and the signature's form (int, symbol name, or [op, args...]) at `symbols`."""
    if isinstance(dim, int):
        return dim
    if isinstance(dim, str):
        return symbols[dim]
    op, *args = dim
    values = [evaluate_size(a, symbols) for a in args]
    if op == "+":
        return sum(values)
    if op == "*":
        out = 1
        for v in values:
            out *= v
        return out
    if op == "//":
        return values[0] // values[1]
    if op == "%":
        return values[0] % values[1]
    if op in ("max", "min"):
        return (max if op == "max" else min)(values)
    raise ValueError(f"a size expression with an unknown op {op!r}")


def format_size(dim: Any) -> str:
    """A size in program.json's form as people write it: batch*seq, (seq + 15)//16."""
    if isinstance(dim, (int, str)):
        return str(dim)
    op, *args = dim
    if op in ("max", "min"):
        return f"{op}({', '.join(format_size(a) for a in args)})"
    parts = [format_size(a) if isinstance(a, (int, str)) else f"({format_size(a)})" for a in args]
    return (op if op in ("*", "//", "%") else f" {op} ").join(parts)
