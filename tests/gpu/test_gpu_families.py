"""Each kernel family on CUDA in float32, float16 and bfloat16, at the corners of a dynamic range."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from aotpack.exporter import ModelSpec
from aotpack.verification import to_numpy
from gpu_helpers import HERE, compare, export_cuda
from torch import nn


class Pointwise(nn.Module):  # a fused chain with broadcasting and a strided (transposed) input
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 1))

    def forward(self, x):
        return torch.tanh(x.transpose(0, 1) * self.w + 1.0).sigmoid() * F.gelu(x.transpose(0, 1))


class Reductions(nn.Module):
    def forward(self, x):
        return (x.sum(-1), x.mean(0), x.amax(-1), x.var(-1), torch.softmax(x, -1), torch.log_softmax(x, -1),
                F.layer_norm(x, (16,)), x.argmax(-1))


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 48)

    def forward(self, x):
        return self.fc(x)


class Bmm(nn.Module):
    def forward(self, x):
        return torch.bmm(x.view(1, -1, 16).expand(3, -1, -1), x.t().contiguous().view(1, 16, -1).expand(3, -1, -1))


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(x.t().reshape(1, 16, 1, -1))


class Embedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)

    def forward(self, x):
        return self.emb(x) * 2.0


class PreNorm(nn.Module):
    """Row kernels feeding products, as in a pre-norm model: a layer norm into a linear layer, an RMS norm (over
    48, not a power of two) into one without bias, a softmax into a product."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.up = nn.Linear(16, 48)
        self.rms = nn.Parameter(torch.linspace(0.5, 1.5, 48))
        self.down = nn.Linear(48, 16, bias=False)
        self.mix = nn.Parameter(torch.randn(16, 24))

    def forward(self, x):
        u = self.up(self.norm(x))
        g = u.float()
        r = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-6) * self.rms).to(u.dtype)
        return self.down(r).softmax(-1) @ self.mix


FAMILIES = {"pointwise": Pointwise, "reduction": Reductions, "matmul": Linear, "bmm": Bmm, "conv": Conv,
            "embedding": Embedding, "prenorm": PreNorm}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
LO, HI = 1, 300


def _input(family: str, n: int, dtype: torch.dtype) -> torch.Tensor:
    if family == "embedding":
        return torch.randint(0, 50, (n,))
    return torch.randn(n, 16).to(dtype)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_matches_eager_on_cuda(family, dtype, tmp_path, rt, cuda_arch):
    torch.manual_seed(0)
    module = FAMILIES[family]().to(DTYPES[dtype]).eval()
    spec = ModelSpec(HERE, module, (_input(family, 5, DTYPES[dtype]),), ("x",), {"x": {0: "n"}}, {"n": (LO, HI)})
    result = export_cuda(spec, tmp_path / f"{family}_{dtype}.aotpack", cuda_arch)
    session = rt.Model(result.path).session(device="cuda")
    reference = copy.deepcopy(module).float()  # the same (rounded) weights in float32: the half rule's reference
    for n in (LO, 2, 17, 128, HI):
        torch.manual_seed(n)
        x = _input(family, n, DTYPES[dtype])
        with torch.no_grad():
            half = _listed(module(x))
            expected = _listed(reference(x.float() if x.is_floating_point() else x))
        outputs = session.run([to_numpy(x)])
        compare(outputs, expected, result.manifest["signature"], f"{family} {dtype} n={n}", half=half)


def _listed(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


class WideBlocks(nn.Module):
    """Pre-norm MLP blocks at GPT-2's widths (768 and 3072): the families above stay within the few-row tiles,
    while a model's products over thousands of rows take the large ones (128 x 256 and the tuned), which only
    the benchmark's full-size exports reached before (session 14: a kernel change passed every test here and
    was wrong there)."""

    def __init__(self, dim: int = 768, hidden: int = 3072, layers: int = 2):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.ups = nn.ModuleList(nn.Linear(dim, hidden) for _ in range(layers))
        self.downs = nn.ModuleList(nn.Linear(hidden, dim) for _ in range(layers))

    def forward(self, x):
        for norm, up, down in zip(self.norms, self.ups, self.downs):
            x = x + down(F.gelu(up(norm(x)), approximate="tanh"))
        return x


def test_products_at_model_widths_match_eager_on_cuda(tmp_path, rt, cuda_arch):
    torch.manual_seed(0)
    module = WideBlocks().to(torch.bfloat16).eval()
    spec = ModelSpec(HERE, module, (torch.randn(5, 768).to(torch.bfloat16),), ("x",), {"x": {0: "n"}},
                     {"n": (1, 4096)})
    result = export_cuda(spec, tmp_path / "wide.aotpack", cuda_arch)
    session = rt.Model(result.path).session(device="cuda")
    reference = copy.deepcopy(module).float()
    for n in (1, 16, 300, 2048, 4096):
        torch.manual_seed(n)
        x = torch.randn(n, 768).to(torch.bfloat16)
        with torch.no_grad():
            half, expected = [module(x)], [reference(x.float())]
        compare(session.run([to_numpy(x)]), expected, result.manifest["signature"], f"wide n={n}", half=half)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_folded_norms_match_eager_on_cuda(dtype, tmp_path, rt, cuda_arch, monkeypatch):
    """ir/norm_folding.py on (it is off by default until timed): WideBlocks' second norm folds into the
    product that writes its rows (row sums from its tiles, split-K and persistent ones included over 1..4096
    rows) and the one that reads them (its epilogue applies the norm); CUDA graphs on, verified at export."""
    from aotpack.lowering.ir import norm_folding

    monkeypatch.setattr(norm_folding, "ENABLED", True)
    torch.manual_seed(0)
    module = WideBlocks().to(DTYPES[dtype]).eval()
    spec = ModelSpec(HERE, module, (torch.randn(5, 768).to(DTYPES[dtype]),), ("x",), {"x": {0: "n"}},
                     {"n": (1, 4096)})
    result = export_cuda(spec, tmp_path / "folded.aotpack", cuda_arch)
    assert result.manifest["verification"]["passed"]
    session = rt.Model(result.path).session(device="cuda")
    reference = copy.deepcopy(module).float()
    for n in (1, 16, 300, 2048, 4096):
        torch.manual_seed(n)
        x = torch.randn(n, 768).to(DTYPES[dtype])
        with torch.no_grad():
            half, expected = [module(x)], [reference(x.float())]
        compare(session.run([to_numpy(x)]), expected, result.manifest["signature"], f"folded n={n}",
                half=half if dtype != "float32" else None)


def test_bad_index_is_reported_not_read(tmp_path, rt, cuda_arch):
    module = Embedding().eval()
    spec = ModelSpec(HERE, module, (torch.randint(0, 50, (4,)),), ("x",), {"x": {0: "n"}}, {"n": (1, 8)})
    result = export_cuda(spec, tmp_path / "emb.aotpack", cuda_arch)
    session = rt.Model(result.path).session(device="cuda")
    with pytest.raises(rt.AotpackError, match="outside"):
        session.run([to_numpy(torch.tensor([1, 2, 99]))])
    outputs = session.run([to_numpy(torch.tensor([1, 2, 3]))])  # the session stays usable
    assert outputs[0].shape == (3, 16)


def test_unknown_device_index_is_refused(tmp_path, rt, cuda_arch):
    spec = ModelSpec(HERE, Linear().eval(), (torch.randn(4, 16),), ("x",), {"x": {0: "n"}}, {"n": (1, 8)})
    result = export_cuda(spec, tmp_path / "lin.aotpack", cuda_arch)
    with pytest.raises(rt.AotpackError, match="does not exist"):
        rt.Model(result.path).session(device="cuda:64")
