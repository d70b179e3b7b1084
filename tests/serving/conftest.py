"""Fixtures of the serving tests: packages exported once per session, a Triton model repository written by
`aotpack publish --format triton`, and one tritonserver (from `make triton-server`) serving it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import MODELS, REPO, cli


@pytest.fixture(scope="session")
def tritonserver_binary():
    from aotpack.triton_server import server_binary

    binary = server_binary()
    if binary is None:
        pytest.skip("tritonserver is not installed: `make triton-server` puts it under "
                    "~/.cache/aotpack (or set TRITON_HOME to a folder holding pytriton/tritonserver/bin)")
    return binary


@pytest.fixture(scope="session")
def serving_packages(tmp_path_factory, runtime_build) -> dict[str, Path]:
    """mlp (batch 1..64), block (the transformer block, batch 1..16 and seq 1..64), bag (embeddings, batch 1..32),
    seq (examples/transformer_block as it is: batch 2, seq 1..256, so no batch symbol)."""
    out = tmp_path_factory.mktemp("serving_packages")
    sources = {"mlp": (REPO / "examples" / "mlp" / "model.py", ["--dynamic", "batch=1..64"]),
               "block": (MODELS / "batched_block.py", []), "bag": (MODELS / "embedding_bag.py", []),
               "seq": (REPO / "examples" / "transformer_block" / "model.py", [])}
    packages = {}
    for name, (model, extra) in sources.items():
        packages[name] = out / f"{name}.aotpack"
        cli("export", str(model), *extra, "--name", name, "-o", str(packages[name]), "-q")
    return packages


@pytest.fixture(scope="session")
def backend_dir(runtime_build) -> Path:
    """The backend directory the CMake build lays out (aotpack/libtriton_aotpack.so and libaotpack.so)."""
    folder = runtime_build / "triton_backends"
    assert (folder / "aotpack" / "libtriton_aotpack.so").is_file(), "the build did not make libtriton_aotpack.so"
    return folder
