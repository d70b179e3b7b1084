"""Half values widened to float32 (graph.py `_realize_narrow`): a shared `x.float()` is stored in the half type and
widened by its readers, and a matrix product reads it through its expression rather than a float32 copy."""

from __future__ import annotations

from pathlib import Path

import aotpack
import numpy as np
import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.lowering.ir.kernels import GatheredOperand, MatmulKernel
from aotpack.verification import from_runtime, to_numpy
from torch import nn

HERE = Path(__file__).resolve().parent


class PostNorm(nn.Module):
    """BERT's residual add and layer norm written out: the widened sum is read by the mean, the variance and
    the normalisation."""

    def forward(self, x, r):
        h = (2 * x + 3 * r - 1).float()  # more than a bias add: stored, not recomputed by each reader
        mean = h.mean(-1, keepdim=True)
        var = ((h - mean) ** 2).mean(-1, keepdim=True)
        return ((h - mean) * torch.rsqrt(var + 1e-5)).to(x.dtype)


class WidenedProduct(nn.Module):
    """A float32 product of a widened sum that another op reads too."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 8))

    def forward(self, x, r):
        h = (2 * x + 3 * r - 1).float()
        return h @ self.w.float(), h.sum(-1)


def lowered(model: nn.Module, *args: torch.Tensor):
    spec = ModelSpec(HERE / "model.py", model.eval(), args, ("x", "r"), {"x": {0: "n"}, "r": {0: "n"}}, {"n": (1, 32)})
    plan = resolve_symbols(spec)
    return GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run()


def _args(dtype=torch.bfloat16):
    return torch.randn(4, 16, dtype=dtype), torch.randn(4, 16, dtype=dtype)


def test_a_shared_widened_value_is_stored_in_its_half_type():
    program = lowered(PostNorm(), *_args())
    stored = [program.buffers[s.output] for s in program.steps if program.buffers[s.output].kind == "arena"]
    rows = [b for b in stored if len(b.shape) == 2]  # the sum, not the per-row mean and variance
    assert [b.dtype for b in rows] == ["bfloat16"], stored


def test_a_product_reads_a_widened_value_through_its_expression():
    program = lowered(WidenedProduct(), *_args())
    product = next(s for s in program.steps if isinstance(s, MatmulKernel))
    assert isinstance(product.a, GatheredOperand), product.a
    copies = [s for s in program.steps if program.buffers[s.output].dtype == "float32"
              and len(program.buffers[s.output].shape) == 2 and program.buffers[s.output].kind == "arena"]
    assert not copies, copies  # no float32 copy of the sum


def test_widened_values_match_eager_on_the_cpu(tmp_path, runtime_build):
    from aotpack import runtime

    torch.manual_seed(0)
    for model in (PostNorm(), WidenedProduct().to(torch.bfloat16)):
        args = _args()
        result = aotpack.export(model, args, tmp_path / f"{type(model).__name__}.aotpack",
                                dynamic_shapes={"x": {0: "n"}, "r": {0: "n"}}, ranges={"n": (1, 32)})
        assert result.verification["passed"]
        session = runtime.Model(result.path).session()
        x, r = torch.randn(7, 16, dtype=torch.bfloat16), torch.randn(7, 16, dtype=torch.bfloat16)
        with torch.no_grad():
            expected = model(x, r)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for out, ref in zip(session.run([to_numpy(x), to_numpy(r)]), expected):
            got, want = from_runtime(out, ref.dtype), ref.float().numpy()
            assert np.abs(got - want).max() <= 2e-2 * max(1.0, np.abs(want).max()), type(model).__name__
