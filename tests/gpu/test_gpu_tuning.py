"""Tuning at export on the GPU (lowering/backends/cuda/tuning.py), through aotpack.export with its defaults:
tuning is on because the GPU is local, the package records it, verification passes, the runtime's results
match PyTorch in the tuned buckets, and a second export reads every time from the cache and writes the same
bytes. --no-tune gives the tables' package."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import aotpack
import torch
from aotpack.verification import to_numpy
from gpu_helpers import compare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_tuning import Block  # projections and causal attention over batch and seq

RANGES = {"b": (1, 4), "s": (1, 2048)}


def _export(path, arch, tune=None):
    torch.manual_seed(0)
    model = Block(384).eval().to(torch.bfloat16)  # head dim 96: a qkv product and attention big enough to tune
    x = torch.randn(2, 8, 384, dtype=torch.bfloat16)
    return model, aotpack.export(model, (x,), path, dynamic_shapes={"x": {0: "b", 1: "s"}}, ranges=RANGES,
                                 target="cuda", cuda_arch=(arch,), tune=tune, name="block")


def test_export_tunes_on_the_local_gpu_and_a_second_export_reads_the_cache(tmp_path, rt, cuda_arch, monkeypatch):
    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path / "cache"))
    model, result = _export(tmp_path / "tuned.aotpack", cuda_arch)
    cuda = next(t for t in result.manifest["targets"] if t["kind"] == "cuda")
    assert cuda["configurations"] == "tuned"
    caches = list((tmp_path / "cache" / "tuning").glob("*.json"))
    assert len(caches) == 1, caches
    timings = json.loads(caches[0].read_text())
    assert len(timings) >= 10 and all(t > 0 for t in timings.values()), timings  # candidates x sizes, measured

    session = rt.Model(result.path).session(device="cuda")
    reference = Block(384).eval()
    reference.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    for b, s in ((4, 2048), (4, 1500), (1, 700), (2, 33)):  # the tuned buckets, and below them
        x = torch.randn(b, s, 384).to(torch.bfloat16)
        with torch.no_grad():
            expected, half = reference(x.float()), model(x)
        compare(session.run([to_numpy(x)]), [expected], result.manifest["signature"], f"b {b} s {s}", half=[half])

    _export(tmp_path / "again.aotpack", cuda_arch)
    assert json.loads(caches[0].read_text()) == timings  # nothing timed again
    assert (tmp_path / "again.aotpack").read_bytes() == (tmp_path / "tuned.aotpack").read_bytes()

    _, tables = _export(tmp_path / "tables.aotpack", cuda_arch, tune=False)
    assert next(t for t in tables.manifest["targets"] if t["kind"] == "cuda")["configurations"] == "tables"
