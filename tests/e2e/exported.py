"""Export a model file through the real pipeline and run the package through the C++ runtime."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from aotpack.api import export_spec
from aotpack.build import ExportResult
from aotpack.exporter import load_model_file, parse_dynamic_specs
from aotpack.verification import TOLERANCE, mismatch_report, relative_error, to_numpy


@dataclass
class Exported:
    model: torch.nn.Module  # the very instance that was exported: eager reference with the same weights
    spec: Any
    result: ExportResult

    @property
    def signature(self) -> dict[str, Any]:
        return self.result.manifest["signature"]


def export(model_file: Path, out_dir: Path, dynamic: tuple[str, ...] = ()) -> Exported:
    """Through the pipeline `aotpack export` runs, with its defaults (verification over the ranges included)."""
    spec = load_model_file(model_file)
    result = export_spec(spec, out_dir / f"{Path(model_file).parent.name}.aotpack",
                         cli_ranges=parse_dynamic_specs(dynamic))
    return Exported(spec.model.eval(), spec, result)


def range_points(symbols: list[dict[str, Any]], seed: int = 0) -> list[dict[str, int]]:
    """Every symbol at its minimum, at its maximum, and at an inner point, plus a mixed corner."""
    rng = random.Random(seed)
    if not symbols:
        return [{}]
    inner = {s["name"]: rng.randint(s["min"], s["max"]) for s in symbols}
    points = [{s["name"]: s["min"] for s in symbols}, {s["name"]: s["max"] for s in symbols}, inner]
    if len(symbols) > 1:
        points.append({s["name"]: (s["min"] if i % 2 else s["max"]) for i, s in enumerate(symbols)})
    return [dict(p) for p in {tuple(sorted(p.items())) for p in points}]


def make_inputs(exported: Exported, point: dict[str, int], seed: int) -> list[torch.Tensor]:
    """Random inputs of the point's shapes (integers below the examples' maximum), or the model file's own
    verification_inputs where it has them (offsets that must be sorted)."""
    if exported.spec.verification_inputs is not None:
        return list(exported.spec.verification_inputs(dict(point), seed))
    gen = torch.Generator().manual_seed(seed)
    inputs = []
    for info, example in zip(exported.signature["inputs"], exported.spec.example_inputs):
        shape = [point[d] if isinstance(d, str) else d for d in info["shape"]]
        if example.is_floating_point():
            inputs.append(torch.randn(shape, generator=gen).to(example.dtype))
        else:
            high = int(example.max()) + 1 if example.numel() else 2
            inputs.append(torch.randint(0, max(high, 2), shape, generator=gen).to(example.dtype))
    return inputs


def check_against_eager(exported: Exported, session: Any, inputs: list[torch.Tensor]) -> list[float]:
    with torch.no_grad():
        expected = exported.model(*inputs)
    expected = pytree.tree_leaves(expected)  # tuples, dicts, Hugging Face ModelOutputs: flattened as export does
    outputs = session.run([to_numpy(x) for x in inputs])
    errors = []
    for info, out, ref in zip(exported.signature["outputs"], outputs, expected):
        ref_np = ref.numpy()
        err = relative_error(out, ref_np)
        allowed = TOLERANCE.get(info["dtype"], 0.0)  # integer and boolean outputs exactly
        assert out.shape == ref_np.shape and err <= allowed, mismatch_report(info["name"], out, ref_np)
        errors.append(err)
    return errors

