"""A CI-sized slice of the op_db coverage run (bench/coverage.py, `make coverage`): representative OpInfo ops,
each with its first few samples in float32 and the integer and boolean dtypes it supports, exported as one
model through the real pipeline, run by the C++ runtime and compared with eager."""

from __future__ import annotations

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal needs it

from aotpack.bench import coverage

OPS = [
    # elementwise, with type promotion and integer/boolean dtypes
    "add", "mul", "div.no_rounding_mode", "div.floor_rounding", "pow", "remainder", "maximum", "clamp",
    "where", "exp", "log", "sigmoid", "lgamma", "signbit", "logical_and", "nn.functional.relu",
    "nn.functional.gelu",
    # reductions (0-d inputs, dims 0 / -1, keepdim) and normalisations
    "sum", "mean", "argmax", "cumsum", "logsumexp", "softmax", "nn.functional.layer_norm",
    # views, indexing, data movement (zero-size tensors included)
    "permute", "tril", "cat", "stack", "diagonal", "unfold", "slice_scatter", "gather",
    "index_select", "nn.functional.pad.constant",
    # writes to positions read from data (the scatter kernel), sorting built on it
    "index_put", "scatter_reduce.mean", "msort",
    # matmul, convolution, pooling
    "matmul", "addmv", "nn.functional.conv2d", "nn.functional.avg_pool2d",
]
LIMITS = (3, 1)  # samples per op: float32, and each other dtype


@pytest.fixture(scope="module")
def ops():
    return {coverage.op_name(op): op for op in coverage.op_db()}


@pytest.mark.parametrize("name", OPS)
def test_opinfo_samples_match_eager(name, ops, rt):
    result = coverage.check_op(ops[name], LIMITS)
    assert result.total > 0, f"{name}: no applicable samples ({dict(result.not_applicable)})"
    assert result.ok and result.passed == result.total, f"{name}: " + "; ".join(
        f"{label}: {reason}" for label, reason in result.failures.items())
