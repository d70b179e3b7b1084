"""Export-time verification: the package run through the real C++ runtime at points of its declared ranges,
on every target this machine can run, against PyTorch (compare.py's rule), recorded in the manifest."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from .. import progress
from ..errors import AotpackError
from ..exporter.frames import one_line
from .compare import (
    FLOATING,
    HALF_DTYPES,
    Judgement,
    as_reference,
    from_runtime,
    judge,
    relative_error,
    to_numpy,
)
from .points import Point, example_symbols, inputs_at, made_inputs, range_points

MODES = ("range", "example", "off")
INPUTS_NOTE = "floats drawn from a fixed seed per point; integer and boolean inputs repeat the examples' values"
MADE_INPUTS_NOTE = "the model's verification_inputs(sizes, seed) at every point but the examples"


class VerificationError(AotpackError):
    """The package does not reproduce the model, or cannot be verified although verification was asked for.
    `devices` names the targets ("cpu", "cuda") whose runs failed; empty when no run did (no runtime, eager
    itself failed)."""

    def __init__(self, message: str, devices: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.devices = tuple(devices)


@dataclass(frozen=True)
class References:
    """PyTorch's side of the comparison: the model in float32, and for a half-precision package the model in
    its half type too (the noise floor), both eager on the CPU."""

    float32: Any  # a callable module
    half: Any | None

    def outputs(self, inputs: Sequence[torch.Tensor]) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        widened = [x.float() if x.dtype in (torch.float16, torch.bfloat16) else x for x in inputs]
        with torch.no_grad():
            reference = [as_reference(t) for t in _tensors(self.float32(*widened))]
            half = [as_reference(t) for t in _tensors(self.half(*inputs))] if self.half is not None else None
        return reference, half


def verify_package(path: Path, captured: Any, mode: str = "range") -> dict[str, Any]:
    """Runs the package at the points `mode` names and returns the manifest's verification record. Raises
    VerificationError on any mismatch, and when no runtime library is found (the caller decides about "off")."""
    from .. import runtime

    if mode not in MODES or mode == "off":
        raise ValueError(f"verify_package mode {mode!r}")
    try:
        runtime.library_path()
    except runtime.AotpackError as e:
        raise VerificationError(
            f"cannot verify the package: {e}. Build the runtime (`make runtime` in a checkout, or set "
            "AOTPACK_RUNTIME_LIB to libaotpack.so), or export with --verify=off to write it unverified") from e
    model = runtime.Model(path)
    sessions, not_verified = _sessions(runtime, model)
    for entry in not_verified:
        progress.current().line(f"not verified on {entry['target']}: {entry['reason']}")
    signature = model.manifest["signature"]
    points = [Point("example", example_symbols(signature, captured.example_inputs))]
    if mode == "range":
        points = range_points(signature["symbols"], points[0].symbols)
    record: dict[str, Any] = {"mode": mode, "inputs": INPUTS_NOTE, "points": [], "not_verified": not_verified}
    if not sessions:
        record["passed"] = False
        return record
    half_type = _half_type(captured.model, signature)
    refs = _references(captured, half_type)
    record["reference"] = "float32" if refs.half is None else f"float32, with {half_type} as the noise floor"
    failures = []
    # Outputs that eager gave as all zeros at every point (randomly initialised weights can zero a model's
    # output: HF MobileViT's): matching them shows nothing, so the record and the export's summary say so.
    zero = [True] * len(signature["outputs"])
    made = getattr(captured, "verification_inputs", None)
    if made is not None:
        record["inputs"] = MADE_INPUTS_NOTE
    for index, point in enumerate(points):
        if point.label == "example":
            inputs = _example_inputs(signature, captured.example_inputs)
        elif made is not None:
            inputs = made_inputs(made, signature, captured.example_inputs, point, seed=index)
        else:
            inputs = inputs_at(signature, captured.example_inputs, point, seed=index)
        try:
            reference, half = refs.outputs(inputs)
        except Exception as e:
            if point.label == "example":
                raise VerificationError(_eager_failed(point, e)) from e
            # Made-up inputs can be invalid where the examples were not (indices that must stay below another
            # symbol's size): the point is recorded and said to be unverified, never dropped in silence.
            reason = _skipped(e)
            record["points"].append({"label": point.label, "symbols": dict(point.symbols), "skipped": reason})
            progress.current().line(f"verify {point.describe()}: SKIPPED: {reason}")
            continue
        zero = [z and not np.any(ref) for z, ref in zip(zero, reference)]
        for device, session in sessions:
            start = time.perf_counter()
            try:
                outputs = session.run([to_numpy(x) for x in inputs])
            except runtime.AotpackError as e:
                raise VerificationError(f"verification at {point.describe()} on {device}: the runtime refused the "
                                        f"inputs: {e} (an aotpack bug: please report it with the model)",
                                        (device,)) from e
            # In a half-precision package every floating output is judged against float32 with the half model
            # as the noise floor, a float32 one too: it is computed from half values (logits widened at the end).
            judgements = [judge(info["name"], info["dtype"], from_runtime(out, _torch_dtype(info["dtype"])), ref,
                                h if half_type is not None and info["dtype"] in FLOATING else None,
                                half_dtype=half_type)
                          for info, out, ref, h in zip(signature["outputs"], outputs, reference,
                                                       half or [None] * len(reference))]
            passed = all(j.passed for j in judgements)
            record["points"].append({"label": point.label, "symbols": dict(point.symbols), "device": device,
                                     "outputs": [j.record() for j in judgements], "passed": passed})
            progress.current().line(_progress_line(point, device, judgements, time.perf_counter() - start))
            failures += [(point, device, j) for j in judgements if not j.passed]
        if failures:
            captured_fault = _capture_differs(captured, inputs, reference, signature, values=half is None)
            raise VerificationError(_failure(failures, captured_fault), dict.fromkeys(d for _, d, _ in failures))
    record["passed"] = True
    ran = any("device" in p for p in record["points"])
    all_zero = [info["name"] for info, z in zip(signature["outputs"], zero) if z and ran]
    if all_zero:
        record["all_zero_outputs"] = all_zero
        progress.current().line(f"note: eager gave {', '.join(map(repr, all_zero))} as all zeros at every point "
                                "verified, so matching it shows nothing; verify with weights that do not zero it")
    return record


def _sessions(runtime: Any, model: Any) -> tuple[list[tuple[str, Any]], list[dict[str, str]]]:
    """A session on each target in the package that this machine can run, and why the others were not."""
    kinds = [t["kind"] for t in model.manifest.get("targets", [])]
    sessions: list[tuple[str, Any]] = []
    not_verified = []
    if "cpu" in kinds:
        sessions.append(("cpu", model.session(num_threads=min(os.cpu_count() or 1, 8))))
    if "cuda" in kinds:
        try:
            sessions.append(("cuda", model.session(device="cuda")))
        except runtime.AotpackError as e:
            not_verified.append({"target": "cuda", "reason": _no_gpu_reason(str(e))})
    return sessions, not_verified


def _no_gpu_reason(message: str) -> str:
    """"no GPU here" and the short cause when that is what the runtime found, else its own words."""
    lowered = message.lower()
    if "libcuda" in lowered:
        return "no GPU here (no NVIDIA driver: libcuda.so.1 not found)"
    if "no cuda device" in lowered or "no_device" in lowered or "no device" in lowered:
        return "no GPU here (the driver sees no CUDA device)"
    return message


def _references(captured: Any, half_type: str | None) -> References:
    """The float32 model (the weights before any --dtype cast) and, for a half package, the half model.

    Both run on the CPU, also when the package is verified on a GPU: a user's model may keep CPU tensors that
    only work there, and an eager CUDA kernel that trips a device-side assert (an index out of range on made-up
    inputs) would poison the CUDA context the runtime shares in this process."""
    model = captured.model
    if half_type is None:
        return References(model, None)
    float32 = captured.float32_model if captured.float32_model is not None else _float32_copy(model)
    return References(float32, model)


def _float32_copy(module: Any) -> Any:
    """A model given in a half type has no float32 weights to go back to; its weights widened are the closest
    reference (it then measures the kernels' error, not the rounding of the weights)."""
    return copy.deepcopy(module).float()


def _tensors(value: Any) -> list[torch.Tensor]:
    """Tuples, dicts, Hugging Face ModelOutputs: flattened as torch.export flattens outputs."""
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _example_inputs(signature: dict[str, Any], examples: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """At the example point: the examples' own integer values, floats drawn from seed 0."""
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(x.shape, generator=gen).to(x.dtype) if x.is_floating_point() else x.clone()
            for x in examples]


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _half_type(model: Any, signature: dict[str, Any]) -> str | None:
    """The half type a package computes in: its outputs', else its model's weights' (a half model may widen
    what it returns, as language models do their logits); None for a float32 package."""
    names = [o["dtype"] for o in signature["outputs"]]
    if isinstance(model, torch.nn.Module):
        names += [str(t.dtype).removeprefix("torch.") for t in (*model.parameters(), *model.buffers())
                  if t.is_floating_point()]
    return next((name for name in names if name in HALF_DTYPES), None)


def _progress_line(point: Point, device: str, judgements: list[Judgement], seconds: float) -> str:
    errors = ", ".join(f"{j.name} {j.error:.1e}{' <= ' if j.passed else ' > '}{j.allowed:.1e}" for j in judgements)
    verdict = "ok" if all(j.passed for j in judgements) else "FAILED"
    return f"verify {device} {point.describe()}: {errors} {verdict} ({seconds:.2f} s)"


def _failure(failures: list[tuple[Point, str, Judgement]], captured_fault: str | None = None) -> str:
    lines = [f"at {point.describe()} on {device}: {j.explain()}" for point, device, j in failures]
    if captured_fault is not None:
        cause = (f"torch.export's own graph of the model already differs from the model at "
                 f"{failures[0][0].describe()} ({captured_fault}): torch.export fixed something the model computes "
                 "from the sizes to its value at the example inputs (int() of math.sqrt or ** 0.5 of a size does "
                 "this), so no package can follow the model over these ranges; this is not an aotpack bug.\n"
                 "hint: compute such sizes with integer ops on tensor.shape (//, *, +), or declare the sizes "
                 "involved static with --dynamic name=N..N")
    elif all(j.half_overflows for _, _, j in failures):
        cause = "The model itself overflows in the half type at these points (see above); this is not an aotpack bug."
    else:
        cause = ("This is an aotpack bug: please report it with the model. `--verify=off` writes the package "
                 "anyway, unverified.")
    return ("the exported package does not reproduce the model, so it was not written:\n  "
            + "\n  ".join(lines) + "\n" + cause)


# A difference between torch.export's graph and the model far above any rounding: a size fixed at capture.
CAPTURE_FAULT_TOLERANCE = 1e-2


def _capture_differs(captured: Any, inputs: Sequence[torch.Tensor], reference: Sequence[np.ndarray],
                     signature: dict[str, Any], values: bool) -> str | None:
    """Where the package failed: whether the graph torch.export captured, run by PyTorch, already differs from
    the model there (in an output's shape, or with `values` far beyond rounding: not for a half-precision graph,
    whose own rounding is that large), and how; None where it follows the model. torch.export can specialise a size without reporting a guard (HF DPT's
    `int(sequence_length ** 0.5)`): every package built from that graph then fails, through no fault of its own."""
    try:
        with torch.no_grad():
            outputs = _tensors(captured.program.module()(*inputs))
    except Exception as e:  # noqa: BLE001 - the graph refusing these inputs says it differs
        return f"it fails to run there: {type(e).__name__}: {one_line(str(e), 160)}"
    for info, out, ref in zip(signature["outputs"], outputs, reference):
        if tuple(out.shape) != tuple(ref.shape):
            return f"output {info['name']!r} has shape {tuple(out.shape)} there, the model's {tuple(ref.shape)}"
        if values and out.is_floating_point() and relative_error(as_reference(out), ref) > CAPTURE_FAULT_TOLERANCE:
            return f"output {info['name']!r} differs from the model's by far more than rounding"
    return None


def _eager_failed(point: Point, e: Exception) -> str:
    return (f"verification at {point.describe()}: PyTorch itself failed to run the model on the example inputs: "
            f"{type(e).__name__}: {one_line(str(e))}")


def _skipped(e: Exception) -> str:
    return (f"PyTorch cannot run the model on the inputs verification made here ({type(e).__name__}: "
            f"{one_line(str(e), 160)}); if the model cannot run at these sizes, narrow the range with --dynamic, "
            "else check this point with your own inputs")
