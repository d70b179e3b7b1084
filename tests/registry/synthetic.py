"""Small packages written by the real writer from hand-made manifests, for tests that need no export:
the manifest fields diff and signing read, random weights, and stand-in kernel bytes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy
from aotpack.packages import layout
from aotpack.packages.writer import canonical_json, write_package

BASE_MANIFEST: dict[str, Any] = {
    "name": "mlp",
    "version": "1.2.3",
    "producer": {"aotpack": "0.1.0", "torch": "2.13.0+cpu", "compiler": "g++ 12.2.0", "python": "3.11.7"},
    "targets": [{"kind": "cpu", "arch": "x86_64", "isa": "x86-64-v3", "library": "cpu/x86-64-v3/kernels.so"}],
    "signature": {
        "symbols": [{"name": "batch", "min": 1, "max": 64}],
        "inputs": [{"name": "x", "dtype": "float32", "shape": ["batch", 8]}],
        "outputs": [{"name": "output", "dtype": "float32", "shape": ["batch", 4]}],
    },
    "metadata": {"kernels": 1, "steps": 1, "arena_bytes": 0},
    "user_metadata": {"license": "MIT"},
}


def weights(seed: int = 0, shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(np.float32)
            for name, shape in (shapes or {"fc.weight": (4, 8), "fc.bias": (4,)}).items()}


def write(path: Path, manifest: dict[str, Any] | None = None, tensors: dict[str, np.ndarray] | None = None,
          kernels: bytes = b"\x7fELF stand-in kernel library", program: dict | None = None) -> Path:
    manifest = copy.deepcopy(manifest or BASE_MANIFEST)
    members = {
        layout.PROGRAM: canonical_json(program or {"steps": [{"kernel": "k_1", "args": [0, 1, 2]}]}),
        layout.WEIGHTS: safetensors.numpy.save(tensors if tensors is not None else weights()),
        layout.cpu_library("x86-64-v3"): kernels,
    }
    write_package(path, manifest, members)
    return path


def changed(**fields: Any) -> dict[str, Any]:
    """BASE_MANIFEST with top-level fields replaced."""
    manifest = copy.deepcopy(BASE_MANIFEST)
    manifest.update(copy.deepcopy(fields))
    return manifest
