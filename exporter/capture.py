"""Capturing the model with torch.export for inference, and checking the result is something the package
can reproduce: tensor outputs only, no state changed in place, and the declared ranges kept exactly."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind, TensorArgument

from ..errors import CaptureError
from .diagnose import CaptureContext, explain
from .dynamic import SymbolSpec, capture_examples, inner_value
from .frames import UserFiles, one_line, short_path
from .min_max import simplified_min_max
from .model_file import ModelSpec
from .quiet import quiet_torch

INFERENCE_NOTE = (
    "captured for inference: the model in eval mode (dropout off, batch norm on running statistics), "
    "under torch.no_grad()"
)


@dataclass(frozen=True)
class CapturedProgram:
    program: ExportedProgram  # decomposed to core ATen (plus what the lowering asked to keep)
    symbols: tuple[SymbolSpec, ...]
    symbol_of: Mapping[str, str]  # torch's symbol in placeholder shapes ("s27") -> user symbol ("seq")
    input_names: tuple[str, ...]  # forward-argument names of the user inputs, in order
    output_names: tuple[str, ...]  # "output"; a flat dict's keys; else "output_0", "output_1", ... (flattened)
    model_file: Path
    example_inputs: tuple[torch.Tensor, ...]  # as model.py gave them (not enlarged for capture)
    notes: tuple[str, ...]  # what the user should know about how the model was captured
    model: Any = None  # eager PyTorch in the package's dtype (a callable module): what verification runs
    float32_model: torch.nn.Module | None = None  # the model before a --dtype cast: the float32 reference
    verification_inputs: Callable[[dict[str, int], int], Any] | None = None  # ModelSpec's


def capture(
    spec: ModelSpec,
    symbols: Iterable[SymbolSpec] = (),
    dynamic_shapes: Mapping[str, Any] | None = None,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> CapturedProgram:
    symbols = tuple(symbols)
    files = UserFiles(spec.path)
    example_notes: tuple[str, ...] = ()
    # torch 2.11 cannot prove guards such as Min(16*seq, 32*seq) == 16*seq that every grouped-query
    # attention adds; simplified_min_max() gives it torch 2.13's rule for them (min_max.py says why).
    with simplified_min_max():
        if spec.program is not None:  # captured by the caller already
            program = spec.program
        else:
            inputs, example_notes = capture_examples(spec, symbols)
            spec.model.eval()
            if spec.float32_model is not None:  # verification's reference runs as the package does: for inference
                spec.float32_model.eval()
            try:
                with torch.no_grad(), quiet_torch():
                    # Non-strict: the user's Python runs as written, so their errors carry their own frames.
                    program = torch.export.export(spec.model, inputs, dynamic_shapes=dynamic_shapes, strict=False)
            except Exception as e:
                raise _explained(e, CaptureContext(spec, symbols, dynamic_shapes, inputs, files)) from e
        try:
            with quiet_torch():
                program = program.run_decompositions(decomposition_table(decompositions))
        except Exception as e:
            raise CaptureError(
                f"decomposing the captured graph to core ATen failed: {type(e).__name__}: {one_line(str(e))}"
                + _original_line(str(e))
            ) from e

    _reject_mutations(program, files)
    symbol_of = _symbol_of(program, spec, symbols)
    _check_ranges(program, symbols, symbol_of)
    _check_guards(program, spec, symbols)
    return CapturedProgram(
        program=program,
        symbols=symbols,
        symbol_of=symbol_of,
        input_names=spec.input_names,
        output_names=_output_names(program),
        model_file=spec.path,
        example_inputs=spec.example_inputs,
        notes=(INFERENCE_NOTE, *example_notes),
        model=spec.model,
        float32_model=spec.float32_model,
        verification_inputs=spec.verification_inputs,
    )


def _explained(exc: Exception, ctx: CaptureContext) -> CaptureError:
    try:
        return explain(exc, ctx)
    except Exception:  # noqa: BLE001 - a torch whose errors look new to diagnose.py still gets one line
        return CaptureError(f"torch.export failed: {type(exc).__name__}: {one_line(str(exc))}")


def decomposition_table(extra: Mapping[Any, Callable[..., Any]] | None) -> Any:
    """torch's default table (everything to core ATen) with the lowering's own entries on top; an entry of
    None takes the op out of the table, so the graph keeps it for the lowering's own fused kernel."""
    default = getattr(torch.export, "default_decompositions", None)
    if default is not None:
        table = default()
    else:  # older torch
        from torch._decomp import core_aten_decompositions

        table = dict(core_aten_decompositions())
    for op, fn in (extra or {}).items():
        if fn is None:
            table.pop(op, None)
        else:
            table[op] = fn
    return table


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _original_line(message: str) -> str:
    """`\n  at FILE:LINE (code)`: the model line of the node that failed, from torch's "Original traceback"."""
    tail = message.partition("Original traceback:")[2]
    frames = list(re.finditer(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in \w+\n\s*(?P<code>.*)', tail))
    if not frames:
        return ""
    last = frames[-1]
    return f"\n  at {short_path(last['file'])}:{last['line']} ({last['code'].strip()})"


def _node_line(program: ExportedProgram, name: str, files: UserFiles) -> str:
    """` at model.py:12 (self.count += 1)` for the graph node that wrote a mutated value, when known."""
    for node in program.graph.nodes:
        if node.name == name:
            frames = [m for m in _FRAME.finditer(node.meta.get("stack_trace") or "") if m["file"] in files]
            if frames:
                return f" at {files.frame(frames[-1]['file'], int(frames[-1]['line'])).describe()}"
    return ""


def _reject_mutations(program: ExportedProgram, files: UserFiles) -> None:
    # A package runs a pure function of its inputs; state a model updates in place would be lost silently.
    # (These only show after run_decompositions: export's first graph keeps the in-place ops.)
    sig = program.graph_signature
    for node_name, buffer in sig.buffers_to_mutate.items():
        raise CaptureError(
            f"forward() updates buffer {buffer!r} in place{_node_line(program, node_name, files)}; aotpack "
            "exports inference-only models whose forward() changes no state\nhint: remove the update, or "
            "guard it with `if self.training:`"
        )
    for node_name, arg in sig.user_inputs_to_mutate.items():
        raise CaptureError(
            f"forward() modifies its input {arg!r} in place{_node_line(program, node_name, files)}; the "
            "package cannot write back into its caller's tensors\nhint: use the out-of-place op (x = x + 1)"
        )


def _output_names(program: ExportedProgram) -> tuple[str, ...]:
    """Names over the flattened outputs; any non-tensor output is refused, named by its path (`output[1]`)."""
    spec = program.call_spec.out_spec
    user = [s.arg for s in program.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    for i, arg in enumerate(user):
        if not isinstance(arg, TensorArgument):
            raise CaptureError(
                f"forward() returns {_non_tensor(arg)} as {_output_path(spec, len(user), i)}, not a tensor; "
                "aotpack packages return tensors only\nhint: return only tensors (wrap a number as "
                "torch.tensor(...) or drop it)"
            )
    if spec is None or spec.is_leaf():
        return ("output",)
    return _mapping_keys(spec, len(user)) or tuple(f"output_{i}" for i in range(len(user)))


def _mapping_keys(spec: Any, count: int) -> tuple[str, ...] | None:
    """The keys, when forward() returns a flat dict of tensors (Hugging Face's ModelOutput: `logits`)."""
    try:
        paths = [path for path, _ in pytree.tree_flatten_with_path(pytree.tree_unflatten(list(range(count)), spec))[0]]
    except Exception:  # noqa: BLE001 - pytree API differences across torch versions: fall back to output_i
        return None
    keys = [path[0].key if len(path) == 1 and isinstance(path[0], pytree.MappingKey) else None for path in paths]
    if all(isinstance(k, str) and k.isidentifier() for k in keys) and len(set(keys)) == len(keys):
        return tuple(keys)
    return None


def _output_path(spec: Any, count: int, index: int) -> str:
    try:
        leaves = pytree.tree_flatten_with_path(pytree.tree_unflatten(list(range(count)), spec))[0]
        return "output" + pytree.keystr(leaves[index][0])
    except Exception:  # noqa: BLE001 - pytree API differences across torch versions; the index still says which
        return f"output {index}"


def _non_tensor(arg: Any) -> str:
    if type(arg).__name__ == "ConstantArgument":
        value = arg.value
        return "None" if value is None else f"the {type(value).__name__} {value!r}"
    if type(arg).__name__ == "SymIntArgument":
        return "a Python int computed from input sizes"
    return f"a {type(arg).__name__.removesuffix('Argument')}"


def _user_placeholders(program: ExportedProgram) -> list[torch.fx.Node]:
    names = [s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    return [nodes[name] for name in names]


def _symbol_of(program: ExportedProgram, spec: ModelSpec, symbols: tuple[SymbolSpec, ...]) -> dict[str, str]:
    dynamic = {s.name for s in symbols if not s.is_static}
    symbol_of: dict[str, str] = {}
    for arg, node in zip(spec.input_names, _user_placeholders(program)):
        shape = node.meta["val"].shape
        for axis, user in spec.dynamic_axes.get(arg, {}).items():
            size = shape[axis]
            if user in dynamic and isinstance(size, torch.SymInt):
                expr = size.node.expr
                if getattr(expr, "is_Symbol", False):
                    symbol_of[str(expr)] = user
    return symbol_of


def _check_ranges(
    program: ExportedProgram, symbols: tuple[SymbolSpec, ...], symbol_of: Mapping[str, str]
) -> None:
    # The declared range is a contract the runtime enforces; a graph torch narrowed (or that it proved valid
    # only for part of the range) must not be packaged as if it covered all of it.
    declared = {s.name: s for s in symbols}
    for sym, bounds in program.range_constraints.items():
        user = symbol_of.get(str(sym))
        if user is None:
            continue
        s = declared[user]
        lo, hi = bounds.lower, bounds.upper
        if _as_int(lo) != s.min or _as_int(hi) != s.max:
            raise CaptureError(
                f"torch.export kept {user} only over {lo}..{hi}, not the declared {s.min}..{s.max}; "
                f"declare --dynamic {user}={lo}..{hi} if that is the real range"
            )


# Points of the declared box at which torch.export's guards are tried: every corner up to this many symbols,
# else every symbol at both ends alone (the others at their example sizes) and all at each end together; and
# the point inside the ranges that verification runs at, so a guard such as `h % 4 == 0` that holds at every
# corner is refused here with its text rather than at verification.
GUARD_CORNER_SYMBOLS = 6
_SIZE_IN_GUARD = re.compile(r"(?:L\['(\w+)'\]|\b(\w+))\.size\(\)\[(\d+)\]")


def _check_guards(program: ExportedProgram, spec: ModelSpec, symbols: tuple[SymbolSpec, ...]) -> None:
    """torch.export can keep a guard on the sizes without reporting it as a constraint on the ranges (HF DPT's
    `int(sequence_length ** 0.5)` fixed at its example value under `trunc(sqrt(h*w)) == 4`): the graph then
    holds only where the guard does. The program's own guard function (what ExportedProgram.module() checks
    its inputs with) is tried on meta tensors at points of the declared ranges, so such a graph is refused
    here, naming the guard, rather than packaged as if it covered the ranges."""
    dynamic = [s for s in symbols if not s.is_static]
    if not dynamic or not spec.example_inputs:
        return
    try:
        guards = getattr(program.module(), "_guards_fn", None)
    except Exception:  # noqa: BLE001 - a torch without it: nothing to try
        return
    if guards is None:
        return
    example = dict(zip(spec.input_names, spec.example_inputs))
    sizes_at = {s.name: next((example[arg].shape[axis] for arg, axes in spec.dynamic_axes.items()
                              for axis, name in axes.items() if name == s.name and arg in example), s.min)
                for s in dynamic}
    for point in _guard_points(dynamic, sizes_at):
        inputs = []
        for name, x in example.items():
            shape = list(x.shape)
            for axis, sym in spec.dynamic_axes.get(name, {}).items():
                shape[axis] = point.get(sym, shape[axis])
            inputs.append(torch.empty(shape, dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor) else x)
        try:
            guards(*inputs)
        except AssertionError as e:
            guard = _SIZE_IN_GUARD.sub(lambda m: _size_name(m, spec), one_line(str(e)).removeprefix("Guard failed: "))
            at = ", ".join(f"{k}={v}" for k, v in point.items())
            raise CaptureError(
                f"torch.export's graph holds only where {guard}, which fails at {at} in the declared ranges: "
                "torch.export fixed something the model computes from the dynamic sizes to its value at the example "
                "inputs (int() of math.sqrt or ** 0.5 of a size does this, and so does a Python branch on sizes "
                "that torch does not report, such as `if h == w`)\n"
                "hint: compute such sizes with integer ops on tensor.shape (//, *, +) and branch with tensor ops, "
                "try example inputs whose sizes differ from each other and from the ranges' ends, or declare the "
                "sizes involved static (--dynamic name=N..N)") from e
        except Exception:  # noqa: BLE001 - inputs the guard function cannot take (a non-tensor): no judgement
            return


def _guard_points(dynamic: list[SymbolSpec], example: Mapping[str, int]) -> list[dict[str, int]]:
    inner = {s.name: inner_value(s.min, s.max) for s in dynamic}
    if len(dynamic) <= GUARD_CORNER_SYMBOLS:
        corners = itertools.product(*((s.min, s.max) for s in dynamic))
        return [dict(zip((s.name for s in dynamic), c)) for c in corners] + [inner]
    points = [{s.name: s.min for s in dynamic}, {s.name: s.max for s in dynamic}]
    for s in dynamic:
        points += [{**example, s.name: s.min}, {**example, s.name: s.max}]
    return [*points, inner]


def _size_name(m: re.Match, spec: ModelSpec) -> str:
    """`L['x'].size()[2]` (or `x.size()[2]`) in a guard as the symbol declared for that axis."""
    arg, axis = m.group(1) or m.group(2), int(m.group(3))
    return spec.dynamic_axes.get(arg, {}).get(axis, m.group(0))


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # torch's int_oo, or a symbolic bound
        return None
