"""Split-K products on a GPU (MatmulConfig.split_k): every product forced to split its depth, in 4 with 16-row
tiles up to 16 rows and in 2 with 64 x 128 tiles above, exported through aotpack.export (verification on, so the
export itself checks it against eager on the GPU over the range), then run through the C++ runtime: with CUDA
graphs bit-identical to graph-off runs and to itself run after run (the partial sums meet in a fixed order
whichever program arrives last), at many row counts (up to 768 tiles, several programs an SM), and right
against eager. Tuning chooses split-K by timing; this forces it so that it always runs."""

from __future__ import annotations

import copy
import json
import zipfile

import aotpack
import pytest
import torch
from aotpack.exporter import ModelSpec
from aotpack.verification import to_numpy
from gpu_helpers import HERE, compare
from torch import nn


class Mlp(nn.Module):
    """Deep products (768 and 3072), a fused bias + GELU and a residual add: split-K's epilogue path."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(768, 3072)
        self.down = nn.Linear(3072, 768)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(x)))


@pytest.fixture(scope="module")
def split(tmp_path_factory, cuda_arch):
    from aotpack.lowering.backends.cuda import render
    from aotpack.lowering.backends.cuda.matmul_config import MatmulConfig

    def split_everywhere(m, n, k, *args, **kwargs):
        # 64 x 128 tiles from 17 rows: at 2048 rows, 768 tiles of `up` and 192 of `down`, 2 programs each
        return MatmulConfig(16, 32, 128, 8, 4, 4, split_k=4) if m <= 16 else MatmulConfig(64, 128, 64, 8, 4, 4, split_k=2)

    torch.manual_seed(0)
    model = Mlp().to(torch.bfloat16).eval()
    spec = ModelSpec(HERE, model, (torch.randn(5, 768, dtype=torch.bfloat16),), ("x",), {"x": {0: "n"}},
                     {"n": (1, 2048)})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(render, "matmul_config", split_everywhere)
        # untuned: tuning would time the candidates and might not choose split-K
        result = aotpack.export(model, spec.example_inputs, tmp_path_factory.mktemp("split") / "mlp.aotpack",
                                dynamic_shapes=dict(spec.dynamic_axes), ranges=dict(spec.dynamic_ranges), target="cuda",
                                cuda_arch=(cuda_arch,), tune=False)
    return model, result


def test_the_package_splits_every_bucket_and_verified_them_on_this_gpu(split):
    _, result = split
    with zipfile.ZipFile(result.path) as z:
        cuda = json.loads(z.read("program.json"))["cuda"]
    # each product's launches: its bucket variants, and the step's own launch for the last bucket
    launches = [e for s in cuda["steps"] if "variants" in s for e in (s, *s["variants"]["buckets"])]
    assert len(launches) >= 6 and all("split" in e for e in launches), launches
    assert {b["upto"] for b in launches if "upto" in b} >= {16, 128}, launches
    record = result.verification  # the export ran the package on this GPU, the split buckets among its points
    assert record["passed"] and not record["not_verified"], record
    assert {p["device"] for p in record["points"]} == {"cuda"} and all(p["passed"] for p in record["points"]), record


def test_the_64_row_split_products_keep_their_wgmma_pipelined(split, cuda_arch):
    """The package's 64 x 128 split products, compiled by this machine's Triton, issue their wgmma pipelined:
    ptxas (Triton 3.6) serialized every wgmma of a split slice's loop until the template gave the loop a trip
    count known not zero. tests/codegen/test_triton_split_k.py checks one with the Triton it has."""
    if cuda_arch < 90:
        pytest.skip(f"wgmma is Hopper's (this GPU is sm_{cuda_arch})")
    import sys

    sys.path.insert(0, str(HERE.parents[2] / "scripts"))
    from kernel_resources import cuobjdump, resources

    _, result = split
    with zipfile.ZipFile(result.path) as z:
        listing = json.loads(z.read(f"cuda/sm_{cuda_arch}/kernels.json"))["kernels"]
        found = [resources(z.read(k["cubin"]), cuobjdump())["wgmma"] for k in listing]
    pipelined = [f for f in found if f != "-"]  # the 16-row tiles use mma.sync, not wgmma
    assert pipelined and not [f for f in pipelined if "serialized" in f], found


def test_split_products_replay_bit_identically_and_match_eager(split, rt):
    model, result = split
    reference = copy.deepcopy(model).float()  # the same (rounded) weights in float32: the half rule's reference
    loaded = rt.Model(result.path)
    graphs = loaded.session(device="cuda", io="device")
    direct = loaded.session(device="cuda", io="device", cuda_graphs=False)
    host = loaded.session(device="cuda")
    shapes = [1, 2, 3, 7, 8, 15, 16, 17, 64, 200, 1, 16, 5, 16, 1100, 2048, 1056, 129, 2048]
    for k, n in enumerate(shapes):
        x = torch.randn(n, 768, generator=torch.Generator().manual_seed(k)).to(torch.bfloat16)
        dev = x.cuda()
        torch.cuda.synchronize()
        first = [o.to_torch().clone() for o in direct.run([dev])]
        again = [o.to_torch().clone() for o in direct.run([dev])]
        replayed = [o.to_torch().clone() for o in graphs.run([dev])]
        for a, b, c in zip(first, again, replayed):
            assert torch.equal(a, b), f"n={n}: two graph-off runs differ"
            assert torch.equal(a, c), f"n={n}: the graph's run differs from the graph-off one"
        with torch.no_grad():
            half, expected = [model(x)], [reference(x.float())]
        compare(host.run([to_numpy(x)]), expected, result.manifest["signature"], f"n={n}", half=half)
