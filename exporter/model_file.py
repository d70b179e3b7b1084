"""Loading a user's model.py: the model, its example inputs and its dynamic-shape declarations.

model.py defines:
    model            an nn.Module, or a zero-argument callable returning one
    example_inputs   a tuple of tensors (one tensor is wrapped), or a zero-argument callable returning one
    dynamic_axes     optional: {forward-argument name: {axis: symbol name}}
    dynamic_ranges   optional: {symbol name: (min, max)}, defaults that --dynamic overrides
    dynamic_shapes   optional, instead of dynamic_axes: torch.export's form, {name: {axis: Dim(name, min, max)}}
                     (a Dim's name is the symbol, its bounds the default range; see dynamic_shapes.py)
    verification_inputs  optional: a function (sizes: {symbol: size}, seed: int) -> a tuple of inputs at those
                     sizes, for models whose integer inputs carry structure that repeating the examples' values
                     breaks (EmbeddingBag offsets, sorted lengths); verification then uses it at every point
                     of the ranges but the examples

Any other top-level name that looks like one of these (`dynamic_shape`, `example_input`) is refused by name:
a misspelt setting must not silently export static shapes.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import itertools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.export import ExportedProgram

from ..errors import CaptureError, ModelFileError
from .dynamic_shapes import from_dynamic_shapes
from .frames import UserFiles, display_path, innermost_user_frame, one_line


@dataclass(frozen=True)
class ModelSpec:
    path: Path  # absolute path of model.py
    model: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    input_names: tuple[str, ...]  # forward-argument name of each example input, in order
    dynamic_axes: Mapping[str, Mapping[int, str]]  # axes normalised to be non-negative
    dynamic_ranges: Mapping[str, tuple[int, int]]
    program: ExportedProgram | None = None  # given already captured (aotpack.export of an ExportedProgram)
    float32_model: torch.nn.Module | None = None  # the model before a --dtype cast: verification's reference
    # (sizes, seed) -> inputs at those sizes, where the examples' values repeated would not be valid inputs
    verification_inputs: Callable[[dict[str, int], int], Any] | None = None


# The names aotpack reads from a model.py.
SETTINGS = ("model", "example_inputs", "dynamic_axes", "dynamic_ranges", "dynamic_shapes", "verification_inputs")
_module_ids = itertools.count()


def load_model_file(path: str | Path) -> ModelSpec:
    path = Path(path)
    shown = display_path(path)
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise ModelFileError(f"model file {shown} {what}")
    path = path.resolve()
    module = _import(path, shown)
    files = UserFiles(path)

    _refuse_unknown_settings(module, shown)
    model = _model(module, shown, files)
    examples = _example_inputs(module, shown, files)
    names = forward_input_names(model, len(examples), shown)
    ranges = _dynamic_ranges(module, shown)
    shapes = getattr(module, "dynamic_shapes", None)
    if shapes is not None:
        if getattr(module, "dynamic_axes", None) is not None:
            raise ModelFileError(f"{shown} defines both dynamic_shapes and dynamic_axes; define one of them")
        raw_axes, dim_ranges = from_dynamic_shapes(shapes, names, f"{shown}: dynamic_shapes")
        # A Dim's bounds are defaults like dynamic_ranges; dynamic_ranges (then --dynamic) override them.
        ranges = {**dim_ranges, **ranges}
    else:
        raw_axes = getattr(module, "dynamic_axes", None)
    axes = check_dynamic_axes(raw_axes, shown, names, examples)
    made = getattr(module, "verification_inputs", None)
    if made is not None and not callable(made):
        raise ModelFileError(f"{shown}: verification_inputs is {_a(made)}; it must be a function "
                             "(sizes: dict of symbol -> size, seed: int) returning a tuple of inputs")
    return ModelSpec(path, model, examples, names, axes, ranges, verification_inputs=made)


def _refuse_unknown_settings(module: ModuleType, shown: str) -> None:
    """A top-level name close to one aotpack reads, or that starts the way its names do, is a misspelt setting."""
    for name, value in vars(module).items():
        if name.startswith("_") or name in SETTINGS or isinstance(value, (ModuleType, type)):
            continue
        close = difflib.get_close_matches(name, SETTINGS, n=1, cutoff=0.75)
        if close or (name.startswith(("dynamic_", "example_")) and not callable(value)):
            hint = f"did you mean {close[0]}? " if close else ""
            raise ModelFileError(f"{shown} defines {name!r}, which aotpack does not read ({hint}aotpack reads: "
                                 f"{', '.join(SETTINGS)}); rename it, or start it with _ if it is your own")


def _import(path: Path, shown: str) -> ModuleType:
    # A unique module name per load: two model.py files (or one loaded twice) must not share a module.
    name = f"aotpack_user_model_{next(_module_ids)}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelFileError(f"model file {shown} cannot be imported as Python (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    # Registered so that code needing its own module (dataclasses, pickling, inspect.getsource) works.
    sys.modules[name] = module
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)  # so `import layers` finds the model's sibling files
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        sys.modules.pop(name, None)
        raise
    except BaseException as e:  # SystemExit too: a model file that calls exit() is a broken model file
        sys.modules.pop(name, None)
        raise ModelFileError(
            _describe(e, UserFiles(path), shown, "raised while importing the model file")
        ) from e
    finally:
        if added:
            try:
                sys.path.remove(folder)
            except ValueError:
                pass
    return module


def _describe(e: BaseException, files: UserFiles, shown: str, when: str) -> str:
    """`model.py:5 (code): NameError: name 'foo' is not defined (when)`: compiler style, the user's line
    first (the innermost one in their files: a failing sibling module is named, not the import of it)."""
    if isinstance(e, SyntaxError) and e.filename and e.lineno:
        return f"{display_path(e.filename)}:{e.lineno}: SyntaxError: {e.msg} ({when})"
    frame = innermost_user_frame(e, files)
    text = f"{type(e).__name__}: {one_line(str(e))}" if str(e) else type(e).__name__
    return f"{frame.describe() if frame else shown}: {text} ({when})"


def _call_factory(value: Callable[[], Any], what: str, shown: str, files: UserFiles) -> Any:
    try:
        return value()
    except Exception as e:
        raise ModelFileError(_describe(e, files, shown, f"raised by {what}()")) from e


def _model(module: ModuleType, shown: str, files: UserFiles) -> torch.nn.Module:
    if not hasattr(module, "model"):
        raise ModelFileError(
            f"{shown} does not define `model`: define `model = MyModel()` (an nn.Module) "
            "or a function `def model(): return MyModel()`"
        )
    value = module.model
    if not isinstance(value, torch.nn.Module):
        if not callable(value):
            raise ModelFileError(
                f"{shown}: `model` is {_a(value)}; it must be an nn.Module or a zero-argument "
                "function returning one"
            )
        value = _call_factory(value, "model", shown, files)
        if not isinstance(value, torch.nn.Module):
            raise ModelFileError(f"{shown}: model() returned {_a(value)}, not a torch.nn.Module")
    return value


def _example_inputs(module: ModuleType, shown: str, files: UserFiles) -> tuple[torch.Tensor, ...]:
    if not hasattr(module, "example_inputs"):
        raise ModelFileError(
            f"{shown} does not define `example_inputs`: define `example_inputs = (torch.randn(1, 16),)`, "
            "a tuple with one tensor per forward() argument (or a function returning it)"
        )
    value = module.example_inputs
    if callable(value) and not isinstance(value, torch.Tensor):
        value = _call_factory(value, "example_inputs", shown, files)
    if isinstance(value, torch.Tensor):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise ModelFileError(f"{shown}: example_inputs is {_a(value)}; it must be a tuple of tensors")
    if not value:
        raise ModelFileError(f"{shown}: example_inputs is empty; give one tensor per forward() argument")
    for i, item in enumerate(value):
        if not isinstance(item, torch.Tensor):
            raise ModelFileError(
                f"{shown}: example_inputs[{i}] is {_a(item)}, not a tensor; aotpack packages "
                "take tensor inputs only (make other arguments constants of the model)"
            )
    return tuple(value)


def forward_input_names(model: torch.nn.Module, count: int, shown: str) -> tuple[str, ...]:
    """The forward() parameters the example inputs bind to. The package calls forward positionally with
    tensors only, so a forward() that needs keyword-only or variadic arguments cannot be captured."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):  # a C-implemented forward: nothing to check, name them by position
        return tuple(f"input_{i}" for i in range(count))
    kinds = inspect.Parameter
    positional = [p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    cls = type(model).__name__
    for p in params:
        if p.kind is kinds.KEYWORD_ONLY and p.default is p.empty:
            raise CaptureError(
                f"{cls}.forward() takes keyword-only argument `{p.name}`; aotpack passes inputs positionally: "
                "make it a positional argument (before any `*`)"
            )
        if p.kind is kinds.VAR_POSITIONAL:
            raise CaptureError(
                f"{cls}.forward(*{p.name}) takes a variable number of inputs; aotpack needs named inputs: "
                "write forward(self, a, b, ...)"
            )
    if count > len(positional):
        raise ModelFileError(
            f"{shown}: example_inputs has {count} tensors but {cls}.forward() takes {len(positional)} "
            f"argument(s) ({', '.join(p.name for p in positional) or 'none'})"
        )
    missing = [p.name for p in positional[count:] if p.default is p.empty]
    if missing:
        raise ModelFileError(
            f"{shown}: example_inputs has {count} tensor(s) but {cls}.forward() also needs "
            f"{', '.join(missing)}; add an example tensor for each"
        )
    return tuple(p.name for p in positional[:count])


def check_dynamic_axes(
    value: Any, shown: str, names: tuple[str, ...], examples: tuple[torch.Tensor, ...]
) -> dict[str, dict[int, str]]:
    """model.py's dynamic_axes (or what dynamic_shapes gave) checked against forward() and the examples, axes
    made non-negative."""
    if value is None:
        return {}
    form = 'e.g. dynamic_axes = {"input_ids": {1: "seq"}}'
    if not isinstance(value, Mapping):
        raise ModelFileError(f"{shown}: dynamic_axes is {_a(value)}; it must be a dict, {form}")
    result: dict[str, dict[int, str]] = {}
    for arg, axes in value.items():
        if arg not in names:
            raise ModelFileError(
                f"{shown}: dynamic_axes names {arg!r}, which is not an input of forward(); "
                f"the inputs are: {', '.join(names)}"
            )
        if not isinstance(axes, Mapping):
            raise ModelFileError(
                f"{shown}: dynamic_axes[{arg!r}] is {_a(axes)}; it must map axis to symbol, {form}"
            )
        rank = examples[names.index(arg)].dim()
        bound: dict[int, str] = {}
        for axis, symbol in axes.items():
            if not isinstance(axis, int) or isinstance(axis, bool):
                raise ModelFileError(f"{shown}: dynamic_axes[{arg!r}] has axis {axis!r}; axes are integers")
            if not -rank <= axis < rank:
                raise ModelFileError(
                    f"{shown}: dynamic_axes[{arg!r}] binds axis {axis}, but example input {arg!r} has rank "
                    f"{rank} (axes 0..{rank - 1})"
                )
            if not isinstance(symbol, str) or not symbol.isidentifier():
                raise ModelFileError(
                    f"{shown}: dynamic_axes[{arg!r}][{axis}] is {symbol!r}; symbol names are identifiers "
                    'such as "seq" or "batch"'
                )
            bound[axis % rank] = symbol
        result[arg] = bound
    return result


def _dynamic_ranges(module: ModuleType, shown: str) -> dict[str, tuple[int, int]]:
    value = getattr(module, "dynamic_ranges", None)
    if value is None:
        return {}
    form = 'e.g. dynamic_ranges = {"seq": (1, 2048)}'
    if not isinstance(value, Mapping):
        raise ModelFileError(f"{shown}: dynamic_ranges is {_a(value)}; it must be a dict, {form}")
    result: dict[str, tuple[int, int]] = {}
    for symbol, bounds in value.items():
        ok = (
            isinstance(bounds, (tuple, list))
            and len(bounds) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
        )
        if not ok:
            raise ModelFileError(
                f"{shown}: dynamic_ranges[{symbol!r}] is {bounds!r}; it must be (min, max) integers, {form}"
            )
        result[str(symbol)] = (bounds[0], bounds[1])
    return result


def _a(value: object) -> str:
    """`an int`, `a list`: what a wrong value is, for messages."""
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"
