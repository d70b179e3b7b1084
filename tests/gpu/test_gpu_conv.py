"""Convolution as implicit GEMM on CUDA: the Triton matmul loads the columns' tiles from the padded input.

tests/e2e/test_implicit_gemm.py's models (stride, padding and dilation unequal per dim, groups, a 1x1
convolution of a lazy input, conv1d; dynamic batch and width), in float32, float16 and bfloat16, and once
with every matmul operand an expression the template cannot split (both operands gathered).
"""

from __future__ import annotations

import copy

import pytest
import torch
from aotpack.lowering.graph import GraphLowering
from aotpack.verification import to_numpy
from gpu_helpers import compare, export_cuda
from test_implicit_gemm import convs_inputs, convs_spec, unsplittable_operands

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _run(spec, path, rt, cuda_arch, dtype: torch.dtype, split: bool = True) -> None:
    result = export_cuda(spec, path, cuda_arch)
    assert (b"b_fixed = " in path.read_bytes()) == split  # the Triton source is a member of the package
    session = rt.Model(result.path).session(device="cuda")
    model = copy.deepcopy(spec.model).float()
    for batch, width in ((1, 6), (3, 20), (4, 13)):
        inputs = convs_inputs(batch, width, dtype)
        with torch.no_grad():  # float32 on the same (rounded) weights and inputs; the half model as the noise floor
            expected = list(model(*[x.float() for x in inputs]))
            half = list(spec.model(*inputs))
        outputs = session.run([to_numpy(x) for x in inputs])
        compare(outputs, expected, result.manifest["signature"], f"conv {dtype} batch={batch} width={width}", half=half)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_convolution_implicit_gemm_on_cuda(dtype, tmp_path, rt, cuda_arch):
    torch_dtype = DTYPES[dtype]
    spec = convs_spec(None if torch_dtype == torch.float32 else torch_dtype)
    _run(spec, tmp_path / f"conv_{dtype}.aotpack", rt, cuda_arch, torch_dtype)


def test_unsplittable_gathered_operands_on_cuda(tmp_path, rt, cuda_arch, monkeypatch):
    run = GraphLowering.run
    monkeypatch.setattr(GraphLowering, "run", lambda self: unsplittable_operands(run(self)))
    _run(convs_spec(), tmp_path / "conv_unsplit.aotpack", rt, cuda_arch, torch.float32, split=False)
