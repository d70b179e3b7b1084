"""Every op family of tests/e2e/test_ops.py on CUDA, at the bottom, middle and top of its range."""

from __future__ import annotations

import pytest
import torch
from aotpack.verification import to_numpy
from gpu_helpers import compare, export_cuda, skipped_where_this_torch_specialises
from test_ops import CASES, _spec


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_eager_on_cuda(name, tmp_path, rt, cuda_arch):
    spec = _spec(name)
    with skipped_where_this_torch_specialises():
        result = export_cuda(spec, tmp_path / f"{name}.aotpack", cuda_arch)
    _fn, makers, _dynamic, (lo, hi) = CASES[name]
    session = rt.Model(result.path).session(device="cuda")
    for seed, n in enumerate(sorted({lo, hi, (lo + hi) // 2})):
        torch.manual_seed(100 + seed)
        inputs = [m(n) for m in makers]
        with torch.no_grad():
            expected = spec.model(*inputs)
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        outputs = session.run([to_numpy(x) for x in inputs])
        compare(outputs, expected, result.manifest["signature"], f"{name} n={n}")
