"""`aotpack refit`: retrained weights into an exported package's kernels and plan.

Without the model file the new weights must be the package's own tensors (what `aotpack inspect --json`
lists under weights.safetensors). With it, they are the model's parameters and buffers by their
state-dict names, as training saves them: the model is loaded with them and lowered exactly as export
lowers it, which lays the weights out as the kernels read them (e.g. matmul panels); the plan and
kernel sources must come out identical to the package's, or refit refuses (the model changed: export
it again). The package is then verified against eager PyTorch with the new weights, as export does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from .errors import AotpackError
from .packages import layout
from .packages.reader import read_package
from .packages.refit import RefitError, refit
from .packages.writer import canonical_json


def refit_package(package: str | Path, weights: str | Path, output: str | Path, *, version: str | None = None,
                  model_file: str | Path | None = None, dtype: str | None = None) -> dict[str, Any]:
    """Writes `output` from `package` with the weights in the safetensors file `weights`; the final manifest."""
    try:
        tensors = safetensors.torch.load_file(str(weights))
    except (OSError, safetensors.SafetensorError) as e:
        raise RefitError(f"{weights}: not a readable safetensors file ({e})") from e
    if model_file is None:
        # Re-serialised as export serialises, so equal weights give an equal member.
        return refit(package, safetensors.torch.save(tensors), output, version=version, where=str(weights))
    captured, lowered_weights = _lower_like_export(Path(package), Path(model_file), tensors, str(weights), dtype)
    from .verification import verify_package

    return refit(package, safetensors.torch.save(lowered_weights), output, version=version, where=str(weights),
                 verify=lambda trial: verify_package(trial, captured))


def _lower_like_export(package_path: Path, model_file: Path, tensors: dict[str, torch.Tensor], where: str,
                       dtype: str | None):
    from .api import capture_spec
    from .exporter import load_model_file, parse_dynamic_specs
    from .lowering.stages import run_stages
    from .lowering.targets import CpuTarget, CudaTarget, Targets

    package = read_package(package_path)
    spec = load_model_file(model_file)
    state = spec.model.state_dict()
    problems = [f"{n}: missing (expected {_describe(state[n])})" for n in sorted(state) if n not in tensors]
    problems += [f"{n}: not a parameter or buffer of the model" for n in sorted(tensors) if n not in state]
    for n in sorted(state.keys() & tensors.keys()):
        if state[n].dtype != tensors[n].dtype:
            problems.append(f"{n}: dtype {_dtype(tensors[n])}, expected {_dtype(state[n])}")
        if state[n].shape != tensors[n].shape:
            problems.append(f"{n}: shape {list(tensors[n].shape)}, expected {list(state[n].shape)}")
    if problems:
        raise RefitError(f"{where} does not fit the model of {model_file}: {len(problems)} mismatch(es):\n  "
                         + "\n  ".join(problems))
    spec.model.load_state_dict(tensors, strict=True)
    symbols = package.manifest["signature"]["symbols"]
    # As export did, --dtype included: the new weights are cast as the exported ones were.
    captured = capture_spec(spec, parse_dynamic_specs([f"{s['name']}={s['min']}..{s['max']}" for s in symbols]), dtype)
    cpu = next((t for t in package.manifest["targets"] if t["kind"] == "cpu"), None)
    cuda = next((t for t in package.manifest["targets"] if t["kind"] == "cuda"), None)
    targets = Targets(CpuTarget(cpu["isa"]) if cpu else None, CudaTarget(tuple(cuda["archs"])) if cuda else None)
    lowered = run_stages(captured, targets)
    same = _plan_up_to_configurations(lowered.program_json) == _plan_up_to_configurations(
        json.loads(package.members[layout.PROGRAM]))
    if cpu is not None:
        source = lowered.artifacts["cpu"].library.source
        same = same and source.encode() == package.members.get(layout.cpu_source(cpu["isa"]))
    if cuda is not None:
        same = same and _kernel_bodies(lowered.artifacts["cuda"].library.source) == _kernel_bodies(
            package.members.get(layout.CUDA_SOURCE, b"").decode())
    if not same:
        halves = sorted({t["dtype"] for t in package.manifest["signature"]["inputs"]} & {"bfloat16", "float16"})
        hint = (f"; the package takes {halves[0]}: was it exported with --dtype? pass the same --dtype to refit"
                if halves and dtype is None else "")
        raise RefitError(f"{model_file} with {where} lowers to a different plan or kernels than {package_path} "
                         f"(the model or aotpack changed since export): export it again instead of refitting{hint}")
    return captured, lowered.program.weights


def _plan_up_to_configurations(program: dict[str, Any]) -> bytes:
    """The plan without its CUDA section, which names kernels and their configurations per bucket (tuning
    may have chosen others than refit's lowering does); the kernels themselves are compared by
    _kernel_bodies."""
    return canonical_json({k: v for k, v in program.items() if k != "cuda"})


def _kernel_bodies(source: str) -> set[str]:
    """A CUDA library's kernels up to their names and block configurations: tuning at export may have chosen
    other configurations than refit's lowering (the tables'), and the refit package keeps the old cubins."""
    chunks = re.sub(r"\bt_[0-9a-f]{16}\b", "t_", source).split("\n@triton.jit\n")
    # A chunk ends with the comment header of the kernel after it, which depends on which kernel follows:
    # tuning may have made two buckets' kernels one (or one two), so the neighbours differ.
    return {re.sub(r"(\n(#[^\n]*)?)*\Z", "", chunk) for chunk in chunks}


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _describe(t: torch.Tensor) -> str:
    return f"{_dtype(t)}{list(t.shape)}"


__all__ = ["AotpackError", "RefitError", "refit_package"]
