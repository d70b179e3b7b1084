"""The Python API, in the manner of torch.export: `aotpack.export(model, args, path, dynamic_shapes=...)`.

    from torch.export import Dim
    result = aotpack.export(model, (x,), "mlp.aotpack", dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}})
    result.path, result.manifest, result.verification

`aotpack export model.py` is a thin layer over export_model_file() here; both go through export_spec(), so
the CLI and Python exports are the same pipeline: capture, lowering, verification over the declared ranges.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.export import ExportedProgram

from . import knobs, progress
from .build import ExportResult, build_package, check_identity
from .errors import AotpackError
from .exporter import (
    CapturedProgram,
    ModelSpec,
    capture,
    load_model_file,
    parse_dtype,
    parse_dynamic_specs,
    resolve_symbols,
    with_dtype,
)
from .exporter.from_objects import spec_from_exported, spec_from_module
from .lowering.frontend.decompositions import decompositions
from .lowering.targets import parse_targets
from .packages import identity

__all__ = ["ExportResult", "capture_spec", "export", "export_model_file", "export_spec"]


def export(
    model: torch.nn.Module | ExportedProgram,
    args: Sequence[torch.Tensor] | torch.Tensor | None = None,
    path: str | Path | None = None,
    *,
    dynamic_shapes: Any = None,
    ranges: Mapping[str, tuple[int, int]] | None = None,
    dtype: str | torch.dtype | None = None,
    target: str = "cpu",
    cuda_arch: str | Sequence[int] | None = None,
    tune: bool | None = None,
    name: str | None = None,
    version: str = "0.1.0",
    metadata: Mapping[str, str] | None = None,
    verify: str = "range",
    verification_inputs: Callable[[dict[str, int], int], Any] | None = None,
    verbose: bool = False,
) -> ExportResult:
    """Exports `model` called on `args` (example tensors, positionally) to the package file `path`.

    dynamic_shapes: as torch.export takes it, {input: {axis: Dim("seq", min=1, max=2048)}} (the Dims' names are
        the package's symbols), or aotpack's {input: {axis: "seq"}} with `ranges={"seq": (1, 2048)}`.
    model: an nn.Module, or an ExportedProgram (its dynamic axes and ranges are torch's; `dynamic_shapes`, the
        value given to torch.export, names its symbols; `args` defaults to its example inputs).
    dtype: "bf16"/"fp16" (or the torch dtype) casts floating weights and inputs first, for nn.Modules.
    target: "cpu", "cuda" or "cpu,cuda"; cuda_arch: compute capabilities ("80,90" or (80, 90)).
    tune: time CUDA kernel configurations on the local GPU (None: when it is of the target architecture).
    name, version, metadata: the package's registry identity (docs/registries.md): a registry-safe name (default:
        the path's stem or the class name, made registry-safe), a semantic version, user metadata (str -> str).
    verify: "range" (the examples and the ends and inside of every range, on every target this machine runs),
        "example", or "off". A mismatch raises VerificationError and writes nothing.
    verification_inputs: (sizes: {symbol: size}, seed) -> the inputs at those sizes, used at every point but the
        examples where repeating the examples' integer values would not make valid inputs (offsets, lengths).
    Returns the path, the manifest and the verification record; raises an AotpackError subclass for anything the
    caller can fix, with a message saying what, where and what to do.
    """
    if isinstance(model, ExportedProgram):
        if dtype is not None:
            raise AotpackError("dtype= cannot recast an ExportedProgram; export the nn.Module in the dtype you want "
                               "with torch.export, or pass the nn.Module to aotpack.export with dtype=")
        spec = spec_from_exported(model, args, dynamic_shapes)
    elif isinstance(model, torch.nn.Module):
        if args is None:
            raise AotpackError("aotpack.export(model, args, ...): args, the example inputs, are required for an "
                               "nn.Module")
        spec = spec_from_module(model, args if isinstance(args, (tuple, list)) else (args,), dynamic_shapes, ranges)
    else:
        raise AotpackError(f"aotpack.export takes an nn.Module or an ExportedProgram, not a {type(model).__name__}")
    if verification_inputs is not None:
        spec = dataclasses.replace(spec, verification_inputs=verification_inputs)
    name = name or identity.name_from(Path(path).stem if path is not None else type(model).__name__)
    output = Path(path) if path is not None else Path(f"{name}.aotpack")
    if isinstance(cuda_arch, (tuple, list)):
        cuda_arch = ",".join(str(a) for a in cuda_arch)
    with progress.reporting(progress.Progress(_stderr if verbose else None)):
        return export_spec(spec, output, dtype=_dtype_name(dtype), target=target, cuda_arch=cuda_arch, tune=tune,
                           name=name, version=version, metadata=metadata, verify=verify)


def export_model_file(model_file: str | Path, output: str | Path | None = None, *, dynamic: Iterable[str] = (),
                      **options: Any) -> ExportResult:
    """`aotpack export MODEL_FILE`: model.py's model, examples and dynamic dims, `--dynamic` ranges on top.
    Options as export_spec's; progress goes wherever the caller's progress.reporting() sends it."""
    parse_targets(options.get("target", "cpu"), options.get("cuda_arch"), knobs.cpu_isa(),
                  options.get("tune"))  # before the slow load
    report = progress.current()
    with report.stage("load", str(model_file)):
        spec = load_model_file(model_file)
    if output is None:
        from .build import default_name

        output = f"{options.get('name') or default_name(Path(model_file))}.aotpack"
    return export_spec(spec, Path(output), cli_ranges=parse_dynamic_specs(dynamic), **options)


def export_spec(spec: ModelSpec, output: Path, *, cli_ranges: Mapping[str, tuple[int, int]] | None = None,
                dtype: str | None = None, target: str = "cpu", cuda_arch: str | None = None, tune: bool | None = None,
                name: str | None = None,
                version: str = "0.1.0", metadata: Mapping[str, str] | None = None, verify: str = "range",
                dump_stages: Sequence[str] = (), dump: Callable[[str, str], None] | None = None) -> ExportResult:
    """The one pipeline behind the CLI and the Python API."""
    check_identity(name, version, metadata)  # before the capture: a bad name or version fails in a moment
    targets = parse_targets(target, cuda_arch, knobs.cpu_isa(), tune)
    captured = capture_spec(spec, cli_ranges, dtype)
    return build_package(captured, output, name=name, version=version, dump_stages=dump_stages, dump=dump,
                         verify=verify, targets=targets, metadata=metadata)


def capture_spec(spec: ModelSpec, cli_ranges: Mapping[str, tuple[int, int]] | None = None,
                 dtype: str | None = None) -> CapturedProgram:
    """The spec cast to `dtype`, its symbols resolved with `cli_ranges` on top, captured and decomposed as every
    export does (`aotpack refit --model` lowers new weights through this too, so it matches the export)."""
    report = progress.current()
    if dtype is not None:
        spec = with_dtype(spec, parse_dtype(dtype))
    plan = resolve_symbols(spec, cli_ranges)
    with report.stage("capture", "torch.export, eval mode, under torch.no_grad()", heartbeat=True):
        captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    captured = dataclasses.replace(captured, notes=captured.notes + plan.notes)
    for note in captured.notes:
        report.line(f"note: {note}")
    return captured


def _dtype_name(dtype: str | torch.dtype | None) -> str | None:
    if dtype is None or isinstance(dtype, str):
        return dtype
    return str(dtype).removeprefix("torch.")


def _stderr(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)
