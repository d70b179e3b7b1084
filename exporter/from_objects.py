"""A ModelSpec from Python objects (aotpack.export): an nn.Module with its example arguments, or an
ExportedProgram that torch.export already captured. model.py files go through model_file.py instead; both
end as the same ModelSpec, so capture and everything after it cannot tell them apart."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from ..errors import DynamicShapeError, ModelFileError
from .dynamic_shapes import from_dynamic_shapes
from .model_file import ModelSpec, check_dynamic_axes, forward_input_names


def spec_from_module(model: torch.nn.Module, args: Sequence[torch.Tensor], dynamic_shapes: Any = None,
                     ranges: Mapping[str, tuple[int, int]] | None = None) -> ModelSpec:
    """`dynamic_shapes` as torch.export takes it (Dims named after the symbols), or {axis: "seq"} with `ranges`."""
    source = _source_file(type(model))
    shown = type(model).__name__
    examples = _examples(args, shown)
    names = forward_input_names(model, len(examples), shown)
    axes, dim_ranges = from_dynamic_shapes(dynamic_shapes, names, "dynamic_shapes") if dynamic_shapes is not None \
        else ({}, {})
    axes = check_dynamic_axes(axes, "dynamic_shapes", names, examples)
    return ModelSpec(source, model, examples, names, axes, {**dim_ranges, **(ranges or {})})


def spec_from_exported(program: ExportedProgram, args: Sequence[torch.Tensor] | None = None,
                       dynamic_shapes: Any = None) -> ModelSpec:
    """The program's dynamic axes and their ranges are what torch.export recorded. torch does not keep the Dims'
    names, so the symbols are named by `dynamic_shapes` when given (the same value that was passed to
    torch.export), else after the first input axis each appears on (`x_dim0`)."""
    names = tuple(s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT)
    if args is None:
        example_args, example_kwargs = program.example_inputs or ((), {})
        if example_kwargs:
            raise ModelFileError("the ExportedProgram was captured with keyword inputs; pass the example "
                                 "tensors positionally as `args`")
        args = example_args
    examples = _examples(args, "the ExportedProgram")
    if len(examples) != len(names):
        raise ModelFileError(f"the ExportedProgram takes {len(names)} tensor inputs ({', '.join(names)}) but "
                             f"{len(examples)} example tensors were given")
    given: dict[str, dict[int, str]] = {}
    if dynamic_shapes is not None:
        given, _ = from_dynamic_shapes(dynamic_shapes, names, "dynamic_shapes")
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    axes: dict[str, dict[int, str]] = {}
    ranges: dict[str, tuple[int, int]] = {}
    symbol_name: dict[str, str] = {}
    for arg in names:
        for axis, size in enumerate(placeholders[arg].meta["val"].shape):
            expr = size.node.expr if isinstance(size, torch.SymInt) else None
            if expr is None or not getattr(expr, "is_Symbol", False):
                continue
            name = symbol_name.setdefault(str(expr), given.get(arg, {}).get(axis, f"{arg}_dim{axis}"))
            axes.setdefault(arg, {})[axis] = name
            bounds = program.range_constraints[expr]
            try:
                ranges[name] = (int(bounds.lower), int(bounds.upper))
            except (TypeError, ValueError, OverflowError):
                raise DynamicShapeError(
                    f"the ExportedProgram's input {arg!r} axis {axis} has no finite maximum ({bounds.upper}); aotpack "
                    f'plans memory for the maximum: export it with Dim("{name}", min=..., max=...)') from None
    source = _source_file(program)
    return ModelSpec(source, program.module(), examples, names, axes, ranges, program=program)


def _examples(args: Any, shown: str) -> tuple[torch.Tensor, ...]:
    if isinstance(args, torch.Tensor):
        args = (args,)
    if not isinstance(args, (tuple, list)) or not args:
        raise ModelFileError(f"{shown}: args must be a non-empty tuple of example tensors, one per forward() input")
    for i, x in enumerate(args):
        if not isinstance(x, torch.Tensor):
            raise ModelFileError(f"{shown}: args[{i}] is a {type(x).__name__}, not a tensor; aotpack packages take "
                                 "tensor inputs only (make other arguments constants of the model)")
    return tuple(args)


def _source_file(obj: Any) -> Path:
    """Where the model's code lives, so errors point at the user's lines: the module class's file, or for a
    program the outermost file in its graph's stack traces; the working directory when neither is known."""
    if isinstance(obj, ExportedProgram):
        for node in obj.graph.nodes:
            trace = node.meta.get("stack_trace") or ""
            if 'File "' in trace:
                file = trace.split('File "', 1)[1].split('"', 1)[0]
                if Path(file).is_file():
                    return Path(file).resolve()
        return Path.cwd() / "model.py"
    try:
        return Path(inspect.getsourcefile(obj) or "").resolve()
    except TypeError:  # a class defined in C or at the interactive prompt
        return Path.cwd() / "model.py"
