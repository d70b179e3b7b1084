"""The exporter stage: model.py -> a torch.export program over the user's named dynamic dimensions.

    spec = load_model_file("model.py")
    plan = resolve_symbols(spec, parse_dynamic_specs(["seq=1..2048"]))
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions)

or export_model(...) for all three. Every user-caused failure is an aotpack.errors.AotpackError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .capture import CapturedProgram, capture, decomposition_table
from .dtype import parse_dtype, with_dtype
from .dynamic import DynamicPlan, SymbolSpec, capture_examples, parse_dynamic_specs, resolve_symbols
from .model_file import ModelSpec, load_model_file

__all__ = [
    "CapturedProgram",
    "DynamicPlan",
    "ModelSpec",
    "SymbolSpec",
    "capture",
    "capture_examples",
    "decomposition_table",
    "export_model",
    "load_model_file",
    "parse_dtype",
    "parse_dynamic_specs",
    "resolve_symbols",
    "with_dtype",
]


def export_model(
    model_file: str | Path,
    dynamic: Iterable[str] = (),
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
    dtype: str | None = None,
) -> CapturedProgram:
    """Load model.py, apply `--dynamic NAME=MIN..MAX` specs over its defaults (and `--dtype`), capture it."""
    spec = load_model_file(model_file)
    if dtype is not None:
        spec = with_dtype(spec, parse_dtype(dtype))
    plan = resolve_symbols(spec, parse_dynamic_specs(dynamic))
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions)
    if plan.notes:
        captured = replace(captured, notes=captured.notes + plan.notes)
    return captured
