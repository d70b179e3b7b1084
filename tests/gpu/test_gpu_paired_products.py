"""Paired products on a GPU (ir/paired_products.py): a Llama-sized gated MLP, whose gate and up projections run
as one product over their interleaved weights (two projections, Llama's layout, and one cut in halves, Phi-3's), exported through aotpack.export with its defaults (tuning on
where the GPU is the target's, verification on, so the export itself checks it against eager on this GPU over
the range), then run through the C++ runtime at many row counts: with CUDA graphs bit-identical to graph-off
runs, and within the half-precision rule of eager."""

from __future__ import annotations

import copy
import json
import zipfile

import aotpack
import pytest
import torch
from aotpack.verification import to_numpy
from gpu_helpers import compare
from torch import nn


class GatedMlp(nn.Module):
    """Llama's MLP at the benchmark's width (d 1024, ffn 2816), with its residual add."""

    def __init__(self, d: int = 1024, ffn: int = 2816):
        super().__init__()
        self.gate = nn.Linear(d, ffn, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        return x + self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class HalvesMlp(nn.Module):
    """Phi-3's and diffusers' GEGLU layout: one projection (with a bias here) cut in halves, gate and up."""

    def __init__(self, d: int = 1024, ffn: int = 2816):
        super().__init__()
        self.gate_up = nn.Linear(d, 2 * ffn)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        up, gate = self.gate_up(x).chunk(2, dim=-1)
        return x + self.down(up * nn.functional.gelu(gate))


@pytest.fixture(scope="module", params=[("bf16", GatedMlp), ("fp16", GatedMlp), ("bf16", HalvesMlp)],
                ids=["bf16-two", "fp16-two", "bf16-halves"])
def paired(request, tmp_path_factory, cuda_arch):
    torch.manual_seed(0)
    dtype, layout = request.param
    model = layout().eval()
    reference = copy.deepcopy(model)
    result = aotpack.export(model, (torch.randn(5, 1024),), tmp_path_factory.mktemp("paired") / "mlp.aotpack",
                            dynamic_shapes={"x": {0: "n"}}, ranges={"n": (1, 2048)}, dtype=dtype,
                            target="cuda", cuda_arch=(cuda_arch,))
    return dtype, model, reference, result


def test_the_gate_and_up_projections_are_one_kernel_verified_on_this_gpu(paired):
    _, _, _, result = paired
    with zipfile.ZipFile(result.path) as z:
        cuda = json.loads(z.read("program.json"))["cuda"]
        source = z.read("cuda/kernels.py").decode()
    assert len(cuda["steps"]) == 2, cuda["steps"]  # the paired product, then down with its residual add
    assert "acc_pair" in source
    record = result.verification
    assert record["passed"] and not record["not_verified"], record
    assert {p["device"] for p in record["points"]} == {"cuda"} and all(p["passed"] for p in record["points"]), record


def test_paired_products_replay_bit_identically_and_match_eager(paired, rt):
    dtype, model, reference, result = paired
    half_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    half_model = copy.deepcopy(model).to(half_dtype)
    loaded = rt.Model(result.path)
    graphs = loaded.session(device="cuda", io="device")
    direct = loaded.session(device="cuda", io="device", cuda_graphs=False)
    host = loaded.session(device="cuda")
    for k, n in enumerate([1, 2, 7, 16, 17, 64, 128, 129, 200, 512, 513, 1100, 2048, 1, 16]):
        x = torch.randn(n, 1024, generator=torch.Generator().manual_seed(k))
        dev = x.to(half_dtype).cuda()
        first = [o.to_torch().clone() for o in direct.run([dev])]
        replayed = [o.to_torch().clone() for o in graphs.run([dev])]
        for a, b in zip(first, replayed):
            assert torch.equal(a, b), f"n={n}: the graph's run differs from the graph-off one"
        with torch.no_grad():
            half, expected = [half_model(x.to(half_dtype))], [reference(x.to(half_dtype).float())]
        compare(host.run([to_numpy(x.to(half_dtype))]), expected, result.manifest["signature"], f"n={n}", half=half)
