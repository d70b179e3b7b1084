"""Comparing a package's outputs with eager PyTorch: at export (recorded in the manifest) and in tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from .errors import AotpackError

# Relative norm error allowed per dtype (DESIGN.md §6).
TOLERANCE = {"float32": 1e-5, "float64": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}


class VerificationError(AotpackError):
    pass


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """‖out − ref‖ / ‖ref‖ over finite reference elements (non-finite ones must match exactly)."""
    out64, ref64 = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    finite = np.isfinite(ref64)
    if not np.array_equal(np.isnan(out64), np.isnan(ref64)) or not np.array_equal(out64[~finite & ~np.isnan(ref64)],
                                                                                   ref64[~finite & ~np.isnan(ref64)]):
        return float("inf")
    diff = np.linalg.norm((out64 - ref64)[finite])
    norm = np.linalg.norm(ref64[finite])
    return float(diff / norm) if norm > 0 else float(diff)


def mismatch_report(name: str, out: np.ndarray, ref: np.ndarray) -> str:
    """What a failing comparison prints: shapes, errors and where the worst element is."""
    if out.shape != ref.shape:
        return f"{name}: shape {out.shape}, expected {ref.shape}"
    diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    worst = np.unravel_index(np.nanargmax(diff), diff.shape) if diff.size else ()
    return (f"{name}: rel err {relative_error(out, ref):.3e}, max abs err {np.nanmax(diff) if diff.size else 0:.3e}, "
            f"mean abs err {np.nanmean(diff) if diff.size else 0:.3e}, shape {out.shape}, worst at {tuple(map(int, worst))}: "
            f"{out[worst] if diff.size else None} vs {ref[worst] if diff.size else None}")


def verification_inputs(examples: Sequence[torch.Tensor], seed: int = 0) -> list[torch.Tensor]:
    """Fresh float inputs of the examples' shapes from a fixed seed (so packages stay reproducible);
    integer and boolean inputs (indices, masks) keep the example's values, which are valid by construction."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(x.shape, generator=gen).to(x.dtype) if x.is_floating_point() else x.clone() for x in examples]


def to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy()
    return t.detach().contiguous().numpy()


def from_runtime(out: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """A runtime output as numbers: bfloat16 comes back as its raw uint16 bits, widened here to float32."""
    if dtype == torch.bfloat16:
        return (out.astype(np.uint32) << 16).view(np.float32)
    return out.astype(np.float32) if dtype == torch.float16 else out


def verify_package(path: Path, captured: Any) -> dict[str, Any]:
    """Runs the package through the C++ runtime at the example shapes and compares with eager."""
    from . import runtime

    try:
        runtime.library_path()
    except runtime.AotpackError as e:
        return {"skipped": str(e)}
    model = runtime.Model(path)
    inputs = verification_inputs(captured.example_inputs)
    with torch.no_grad():
        expected = captured.program.module()(*inputs)
    expected = pytree.tree_leaves(expected)  # tuples, dicts, Hugging Face ModelOutputs: flattened as export does
    sessions, cuda_skipped = _sessions(runtime, model)
    if not sessions:
        return {"skipped": cuda_skipped}
    result: dict[str, Any] = {}
    for device, session in sessions:
        outputs = session.run([to_numpy(x) for x in inputs])
        errors, failures = {}, []
        for name, out, ref in zip(captured.output_names, outputs, expected):
            ref_np = ref.float().numpy() if ref.dtype in (torch.bfloat16, torch.float16) else ref.numpy()
            err = relative_error(from_runtime(out, ref.dtype), ref_np)
            errors[name] = float(f"{err:.1e}")
            if not err <= TOLERANCE.get(str(ref.dtype).removeprefix("torch."), 0.0):
                failures.append(f"[{device}] " + mismatch_report(name, from_runtime(out, ref.dtype), ref_np))
        if failures:
            raise VerificationError(
                "the exported package does not reproduce eager PyTorch at the example inputs, so it was not written "
                "(this is an aotpack bug; please report it with the model):\n  " + "\n  ".join(failures))
        if not result:
            result = {"inputs": "example shapes, float inputs drawn from seed 0", "rel_error": errors, "passed": True}
            if device != "cpu":
                result["device"] = device
        else:
            result[device] = {"rel_error": errors, "passed": True}
    if cuda_skipped:
        result["cuda"] = {"skipped": cuda_skipped}
    return result


def _sessions(runtime: Any, model: Any) -> tuple[list[tuple[str, Any]], str]:
    """A session on each device the package targets and this machine has, and why CUDA was not run.

    A package with CUDA kernels is verified on this machine's GPU when it has one (a GPU-less export
    records that its CUDA kernels were not run)."""
    kinds = {t["kind"] for t in model.manifest.get("targets", [])}
    sessions: list[tuple[str, Any]] = []
    if "cpu" in kinds:
        sessions.append(("cpu", model.session()))
    reason = ""
    if "cuda" in kinds:
        try:
            sessions.append(("cuda", model.session(device="cuda")))
        except runtime.AotpackError as e:
            reason = f"CUDA kernels not run: {e}"
    return sessions, reason
