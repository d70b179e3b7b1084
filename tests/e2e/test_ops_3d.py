"""3-d convolutions and 3-d pooling (op_models/conv3d.py) through the whole pipeline: export -> package -> C++
runtime -> eager, at the corners and an inner point of every declared range; their structure (each convolution
one implicit-GEMM product, a patch embedding included); and what stays refused, with the user's line."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from aotpack.build import build_package
from aotpack.errors import UnsupportedError
from aotpack.exporter import ModelSpec, capture, load_model_file, resolve_symbols, with_dtype
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.lowering.ir.kernels import GatheredOperand, MatmulKernel, operand_vars, split_gather
from aotpack.verification import TOLERANCE, mismatch_report, relative_error, to_numpy
from exported import check_against_eager, export, make_inputs, range_points
from torch import nn

HERE = Path(__file__).resolve()
MODEL = HERE.parent / "op_models" / "conv3d.py"


def test_3d_convolutions_and_pooling_match_eager_over_their_ranges(tmp_path, rt):
    """Exported as `aotpack export` does (its verification over the ranges included), then run here at every
    range point; no output may be all zeros in eager, or the comparison would prove nothing."""
    exported = export(MODEL, tmp_path)
    session = rt.Model(exported.result.path).session(num_threads=2)
    for seed, point in enumerate(range_points(exported.signature["symbols"])):
        inputs = make_inputs(exported, point, seed)
        with torch.no_grad():
            assert all(out.abs().amax() > 0 for out in exported.model(*inputs))
        check_against_eager(exported, session, inputs)


def _lowered(spec: ModelSpec):
    plan = resolve_symbols(spec)
    return GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run()


def test_each_3d_convolution_is_one_implicit_gemm_product():
    """Every product gathers its columns split into a per-tap and a per-position offset, with no
    [groups, taps, n, od, oh, ow] column buffer; five direct convolutions and a transposed one (as direct
    convolutions) give at least six products."""
    program = _lowered(load_model_file(MODEL))
    products = [s for s in program.steps if isinstance(s, MatmulKernel)]
    assert len(products) >= 6
    _, k_var, _ = operand_vars()
    assert all(isinstance(p.b, GatheredOperand) and split_gather(p.b, k_var) is not None for p in products)
    assert all(len(b.shape) <= 5 for b in program.buffers.values()), "a column buffer"


class PatchEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv3d(3, 16, (2, 4, 4), stride=(2, 4, 4))

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


def test_a_patch_embedding_is_one_product_reading_the_input():
    """VideoMAE's tubelet embedding (kernel == stride): one product of k = 3 * 2 * 4 * 4 whose columns are loads
    of the model's input, and nothing else but the [batch, patches, dim] result the bias is added in."""
    spec = ModelSpec(HERE, PatchEmbedding().eval(), (torch.randn(2, 3, 8, 16, 16),), ("x",),
                     {"x": {0: "batch"}}, {"batch": (1, 4)})
    program = _lowered(spec)
    products = [s for s in program.steps if isinstance(s, MatmulKernel)]
    assert len(products) == 1 and len(program.steps) == 2
    assert int(products[0].k) == 96 and program.buffers[products[0].b.value.buffer].kind == "input"


def test_float64_3d_convolutions_through_their_column_buffer(tmp_path, rt):
    """float64 has no gathering matmul kernel: the columns are written (im2col, six dims) and read from memory."""
    spec = with_dtype(load_model_file(MODEL), torch.float64)
    plan = resolve_symbols(spec)
    result = build_package(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()), tmp_path / "f64.aotpack")
    session = rt.Model(result.path).session(num_threads=2)
    model = copy.deepcopy(spec.model).eval()
    gen = torch.Generator().manual_seed(3)
    inputs = [torch.randn(3, 3, 9, 6, 11, generator=gen, dtype=torch.float64),
              torch.randn(2, 3, 5, 7, 6, generator=gen, dtype=torch.float64)]
    with torch.no_grad():
        expected = model(*inputs)
    for i, (out, ref) in enumerate(zip(session.run([to_numpy(x) for x in inputs]), expected)):
        assert relative_error(out, ref.numpy()) <= TOLERANCE["float64"], mismatch_report(f"output {i}", out, ref.numpy())


class Pool(nn.Module):
    def __init__(self, pool) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x):
        return self.pool(x)


LINE = r"test_ops_3d\.py:\d+ \(return self\.pool\(x\)\): "


@pytest.mark.parametrize("pool, message", [
    (lambda x: F.max_pool3d(x, (2, 6, 6), return_indices=True),
     LINE + r"the indices of 3-d max pooling windows above 64 elements \(2x6x6\) are not supported, only the pooled "
            r"values; pool without return_indices, or with smaller windows"),
    (lambda x: F.adaptive_max_pool3d(x, 2, return_indices=True),
     LINE + r"the indices of 3-d adaptive max pooling are not supported"),
    (lambda x: F.avg_pool3d(x, (2, 9, 9)),
     LINE + r"aten\.avg_pool3d\.default: average pooling windows above 64 elements \(9x9\) are not supported; pool in"),
])
def test_what_3d_pooling_does_not_support_is_refused_at_export_naming_the_line(pool, message, tmp_path):
    spec = ModelSpec(HERE, Pool(pool).eval(), (torch.randn(1, 2, 4, 12, 12),), ("x",), {}, {})
    with pytest.raises(UnsupportedError, match=message):
        build_package(capture(spec, (), None, decompositions()), tmp_path / "pool3d.aotpack")
    assert not (tmp_path / "pool3d.aotpack").exists()


class Indices(nn.Module):
    def forward(self, x):
        return (*F.max_pool3d(x, (2, 3, 2), stride=(1, 2, 1), padding=(1, 1, 0), return_indices=True),
                F.max_pool2d(x[:, 0], 3, 1, 1, return_indices=True)[1])


def test_max_pooling_indices_pick_eagers_element_among_ties_nans_and_infinities(tmp_path, rt):
    """Eager's CPU kernels take the first largest element of a window, the last NaN, and the first element
    inside the input when every one is -inf; 3-d windows unrolled whole, and 2-d, through one formulation."""
    x = torch.randn(2, 3, 5, 6, 7).round()
    x[0, :, 1:3, 2:5, 1:4] = float("-inf")
    x[1, 0, 2, 3, 3] = x[1, 0, 3, 3, 4] = x[1, 0, 1, 1, 1] = float("nan")
    x[1, 1, 4] = float("inf")
    spec = ModelSpec(HERE, Indices().eval(), (x,), ("x",), {}, {})
    result = build_package(capture(spec, (), None, decompositions()), tmp_path / "indices.aotpack")
    outputs = rt.Model(result.path).session().run([to_numpy(x)])
    with torch.no_grad():
        expected = Indices()(x)
    assert np.array_equal(outputs[0], expected[0].numpy(), equal_nan=True)
    for out, ref in zip(outputs[1:], expected[1:]):
        assert np.array_equal(out, ref.numpy()), mismatch_report("indices", out, ref.numpy())
