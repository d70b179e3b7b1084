"""`--dtype bf16/fp16`: weights and inputs stored in half precision, computed in float32 inside kernels."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from aotpack.api import export_spec
from aotpack.exporter import load_model_file, parse_dtype
from aotpack.verification import as_reference, from_runtime, judge, to_numpy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("example, dtype, shape", [
    ("transformer_block", "bf16", (2, 37, 64)),
    ("transformer_block", "fp16", (2, 1, 64)),
    ("cnn", "bf16", (3, 3, 24, 40)),
])
def test_half_precision_package_tracks_eager(example, dtype, shape, tmp_path, rt):
    torch_dtype = parse_dtype(dtype)
    spec = load_model_file(EXAMPLES / example / "model.py")
    result = export_spec(spec, tmp_path / "m.aotpack", dtype=dtype)  # verified over the ranges, as users run it
    assert result.verification["passed"]
    signature = result.manifest["signature"]
    name = str(torch_dtype).split(".")[1]
    assert signature["inputs"][0]["dtype"] == signature["outputs"][0]["dtype"] == name

    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(torch_dtype)
    with torch.no_grad():
        reference = spec.model(x.float())  # float32: the weights before the cast, the inputs as rounded
        eager_half = copy.deepcopy(spec.model).to(torch_dtype)(x)
    (out,) = rt.Model(result.path).session(num_threads=2).run([to_numpy(x)])
    j = judge("output", name, from_runtime(out, torch_dtype), as_reference(reference), as_reference(eager_half))
    # Computing in float32 inside kernels tracks the float32 model at least about as well as eager does.
    assert j.passed, j.explain()
    assert j.error <= 1e-2


class WidenedLogits(torch.nn.Module):
    """A language model's head: computed in the model's dtype, returned widened to float32."""

    def __init__(self):
        super().__init__()
        self.proj, self.head = torch.nn.Linear(32, 64), torch.nn.Linear(64, 100)

    def forward(self, x):
        return self.head(torch.nn.functional.gelu(self.proj(x))).float()


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_float32_output_of_a_half_model_is_judged_against_the_half_noise(dtype, tmp_path):
    """Its float32 output is computed from half values: it is judged against the float32 model with the half
    model as the noise floor, as a half output is, not at float32's 1e-5 (which failed correct packages)."""
    import aotpack

    torch.manual_seed(0)
    result = aotpack.export(WidenedLogits().eval(), (torch.randn(3, 32),), tmp_path / "widened.aotpack", dtype=dtype,
                            dynamic_shapes={"x": {0: torch.export.Dim("n", min=1, max=16)}})
    record = result.verification
    assert record["passed"] and "noise floor" in record["reference"], record
    outputs = [o for p in record["points"] if "outputs" in p for o in p["outputs"]]
    assert outputs and all("half_precision_error" in o and o["allowed"] > 1e-3 for o in outputs), outputs
