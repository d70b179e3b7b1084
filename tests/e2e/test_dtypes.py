"""`--dtype bf16/fp16`: weights and inputs stored in half precision, computed in float32 inside kernels."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from aotpack.build import build_package
from aotpack.exporter import capture, load_model_file, parse_dtype, resolve_symbols, with_dtype
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.verification import from_runtime, mismatch_report, relative_error, to_numpy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("example, dtype, shape", [
    ("transformer_block", "bf16", (2, 37, 64)),
    ("transformer_block", "fp16", (2, 1, 64)),
    ("cnn", "bf16", (3, 3, 24, 40)),
])
def test_half_precision_package_tracks_eager(example, dtype, shape, tmp_path, rt):
    torch_dtype = parse_dtype(dtype)
    spec = with_dtype(load_model_file(EXAMPLES / example / "model.py"), torch_dtype)
    plan = resolve_symbols(spec)
    result = build_package(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()), tmp_path / "m.aotpack")
    signature = result.manifest["signature"]
    assert signature["inputs"][0]["dtype"] == signature["outputs"][0]["dtype"] == str(torch_dtype).split(".")[1]

    x32 = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    x = x32.to(torch_dtype)
    with torch.no_grad():
        reference = spec.model.float()(x.float())  # fp32 reference on the same (rounded) weights and inputs
        spec.model.to(torch_dtype)
        eager_half = spec.model(x).float()
    (out,) = rt.Model(result.path).session(num_threads=2).run([to_numpy(x)])
    ours = from_runtime(out, torch_dtype)
    eager_err = relative_error(eager_half.numpy(), reference.numpy())
    our_err = relative_error(ours, reference.numpy())
    # Computing in float32 inside kernels should track the fp32 reference at least as well as eager does.
    assert our_err <= 1.5 * eager_err + 1e-3, mismatch_report("output", ours, reference.numpy())
    assert our_err <= 1e-2
