"""Chunk digests (docs/package-format.md, "manifest.json"): a member larger than the chunk size also lists the
sha256 of each chunk, which the runtime checks on several threads at once; a package without them (written
before) is checked member by member as before. The tests write packages with a small chunk size so that the MLP's
few kilobytes make many chunks; the runtime reads the size from the manifest."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile

import numpy as np
import pytest
from aotpack.packages import layout
from runtime_helpers import MLP_KERNELS, flip_byte, mlp_program, mlp_reference, rewrite, write_test_package

CHUNK = 1024


@pytest.fixture(scope="module")
def chunked(tmp_path_factory, mlp_weights_np):
    """The MLP package written with CHUNK-byte chunks: (path, manifest)."""
    path = tmp_path_factory.mktemp("chunked") / "mlp.aotpack"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(layout, "DIGEST_CHUNK_BYTES", CHUNK)
        write_test_package(path, mlp_program(), MLP_KERNELS, mlp_weights_np)
    with zipfile.ZipFile(path) as z:
        return path, json.loads(z.read(layout.MANIFEST))


def load_error(rt, path, **kwargs):
    with pytest.raises(rt.AotpackError) as info:
        rt.Model(path, **kwargs)
    return info.value


def test_a_chunked_package_loads_and_runs(rt, chunked, mlp_weights_np):
    path, manifest = chunked
    weights = manifest["members"][layout.WEIGHTS]
    assert weights["chunk_size"] == CHUNK and len(weights["chunk_sha256"]) == -(-weights["size"] // CHUNK) > 3
    x = np.random.default_rng(7).standard_normal((5, 32)).astype(np.float32)
    (y,) = rt.Model(path).session().run([x])
    np.testing.assert_allclose(y, mlp_reference(x, mlp_weights_np), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_flipped_byte_in_any_chunk_is_refused_naming_the_member_and_chunk(rt, chunked, tmp_path, where):
    path, manifest = chunked
    size = manifest["members"][layout.WEIGHTS]["size"]
    chunks = -(-size // CHUNK)
    chunk = {"first": 0, "middle": chunks // 2, "last": chunks - 1}[where]
    offset = {"first": 900, "middle": chunk * CHUNK + 100, "last": size - 1}[where]
    with zipfile.ZipFile(path) as z:  # every offset in the tensors' data, past the safetensors header
        assert 8 + int.from_bytes(z.read(layout.WEIGHTS)[:8], "little") < 900
    bad = flip_byte(path, tmp_path / "bad.aotpack", layout.WEIGHTS, offset)
    e = load_error(rt, bad)
    last = min(size, (chunk + 1) * CHUNK) - 1
    assert e.code == rt.StatusCode.DATA_LOSS
    assert str(e) == (
        f"package {bad}: member {layout.WEIGHTS} does not match its sha256 digest in manifest.json (chunk {chunk} of "
        f"{chunks}, bytes {chunk * CHUNK} to {last}, differs: the file is corrupt or was modified); re-export it, or "
        "pass verify_digests=0 only for trusted files"
    )
    # Unchecked, the same file loads (the flipped bit only changes a weight).
    rt.Model(bad, verify_digests=False)


def test_a_package_without_chunk_digests_is_checked_whole(rt, chunked, tmp_path, mlp_weights_np):
    """As written before chunk digests: members carry only sha256 and size."""
    path, _ = chunked
    old = rewrite(path, tmp_path / "old.aotpack")  # recomputes the members' records the old way
    with zipfile.ZipFile(old) as z:
        assert "chunk_sha256" not in json.loads(z.read(layout.MANIFEST))["members"][layout.WEIGHTS]
    x = np.random.default_rng(8).standard_normal((3, 32)).astype(np.float32)
    (y,) = rt.Model(old).session().run([x])
    np.testing.assert_allclose(y, mlp_reference(x, mlp_weights_np), rtol=1e-5, atol=1e-5)
    bad = flip_byte(old, tmp_path / "bad.aotpack", layout.WEIGHTS, 2000)
    assert str(load_error(rt, bad)).endswith(
        f"member {layout.WEIGHTS} does not match its sha256 digest in manifest.json (the file is corrupt or was "
        "modified); re-export it, or pass verify_digests=0 only for trusted files")


def edit_weights_record(edit):
    def apply(manifest):
        edit(manifest["members"][layout.WEIGHTS])
    return apply


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda e: e["chunk_sha256"].pop(),
         ("manifest.json: members.weights.safetensors.chunk_sha256: has {n_minus_1} digests, but {size} bytes make "
          "{n} chunks of 1024 (the file is corrupt or was modified); re-export it")),
        (lambda e: e.update(chunk_size=0),
         "manifest.json: members.weights.safetensors.chunk_size: expected a positive integer"),
        (lambda e: e.pop("chunk_size"), "manifest.json: members.weights.safetensors: missing field \"chunk_size\""),
        (lambda e: e["chunk_sha256"].__setitem__(1, 7),
         "manifest.json: members.weights.safetensors.chunk_sha256[1]: expected a sha256 digest (a string)"),
    ],
    ids=["count", "zero_size", "no_size", "not_a_string"],
)
def test_malformed_chunk_records_are_refused(rt, chunked, tmp_path, edit, message):
    path, manifest = chunked
    size = manifest["members"][layout.WEIGHTS]["size"]
    n = -(-size // CHUNK)
    bad = rewrite(path, tmp_path / "bad.aotpack", manifest=edit_weights_record(edit), recompute_digests=False)
    e = load_error(rt, bad)
    assert e.code == rt.StatusCode.DATA_LOSS
    assert str(e) == f"package {bad}: " + message.format(n=n, n_minus_1=n - 1, size=size)


def test_the_timing_line_says_how_the_digests_were_hashed(runtime_build, chunked):
    path, manifest = chunked
    chunked_members = sum("chunk_sha256" in m for m in manifest["members"].values())
    env = dict(os.environ, AOTPACK_TIMINGS="1")
    done = subprocess.run([str(runtime_build / "aotpack-run"), str(path), "--repeat", "0", "--sym=batch=2"],
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("aotpack timing: digests:")]
    # manifest.json lists program.json, the weights, the library and its source; those over CHUNK bytes in chunks.
    assert f"4 members ({chunked_members} in chunks) in " in line, line
    assert "threads and the loading thread, sha256 " in line, line
