"""tests/e2e/op_models' files on CUDA: exported for cpu,cuda through the public pipeline, verified at export on
this GPU over their ranges, then run at every range point on the GPU and compared with eager. Their lowerings
(transposed and 3-d convolutions, pooling windows as reductions, grid_sample, order statistics, arithmetic on
sizes) are otherwise checked on the CPU and in the Triton interpreter only."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree
from aotpack.api import export_spec
from aotpack.exporter import load_model_file
from aotpack.verification import to_numpy
from exported import make_inputs, range_points
from gpu_helpers import compare, skipped_where_this_torch_specialises
from test_gpu_examples import _verified_on_both

OP_MODELS = Path(__file__).resolve().parents[1] / "e2e" / "op_models"


@pytest.mark.parametrize("model_file", sorted(p.stem for p in OP_MODELS.glob("*.py")))
def test_op_model_on_cuda(model_file, tmp_path, rt, cuda_arch):
    spec = load_model_file(OP_MODELS / f"{model_file}.py")
    with skipped_where_this_torch_specialises():
        result = export_spec(spec, tmp_path / f"{model_file}.aotpack", target="cpu,cuda", cuda_arch=str(cuda_arch))
    _verified_on_both(result)

    class Exported:  # what exported.make_inputs reads
        pass

    ex = Exported()
    ex.signature, ex.spec = result.manifest["signature"], spec
    session = rt.Model(result.path).session(device="cuda")
    model = spec.model.eval()
    for seed, point in enumerate(range_points(result.manifest["signature"]["symbols"])):
        inputs = make_inputs(ex, point, seed)
        with torch.no_grad():
            expected = pytree.tree_leaves(model(*inputs))
        compare(session.run([to_numpy(x) for x in inputs]), expected, result.manifest["signature"], f"{model_file} {point}")
