"""`aotpack diff`: the changes between two packages and the semantic-version bump they imply."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
from aotpack.packages.diff import diff_packages, minimum_version
from aotpack.packages.identity import parse_version
from aotpack.packages.reader import read_package

from .synthetic import BASE_MANIFEST, changed, weights, write


def _signature(**symbols_or_io):
    sig = copy.deepcopy(BASE_MANIFEST["signature"])
    sig.update(symbols_or_io)
    return sig


CUDA = {"kind": "cuda", "archs": [90], "ptx_version": "8.7", "min_driver_version": 12000, "source": "cuda/kernels.py"}
CPU = BASE_MANIFEST["targets"][0]

# (case, NEW's manifest fields, NEW's other contents, bump, text expected in a change)
CASES = [
    ("identical", {}, {}, "none", None),
    ("range narrowed at the top", {"signature": _signature(symbols=[{"name": "batch", "min": 1, "max": 32}])}, {},
     "major", "batch: 1..64 -> 1..32 (narrowed)"),
    ("range narrowed at the bottom", {"signature": _signature(symbols=[{"name": "batch", "min": 2, "max": 64}])}, {},
     "major", "narrowed"),
    ("range shifted", {"signature": _signature(symbols=[{"name": "batch", "min": 2, "max": 128}])}, {},
     "major", "1..64 -> 2..128"),
    ("range widened", {"signature": _signature(symbols=[{"name": "batch", "min": 1, "max": 128}])}, {},
     "minor", "batch: 1..64 -> 1..128 (widened)"),
    ("input dtype changed", {"signature": _signature(inputs=[{"name": "x", "dtype": "float16", "shape": ["batch", 8]}])},
     {}, "major", "input 0: x: float32[batch, 8] -> x: float16[batch, 8]"),
    ("input renamed", {"signature": _signature(inputs=[{"name": "y", "dtype": "float32", "shape": ["batch", 8]}])},
     {}, "major", "-> y:"),
    ("output added", {"signature": _signature(outputs=[*BASE_MANIFEST["signature"]["outputs"],
                                                       {"name": "aux", "dtype": "float32", "shape": [1]}])},
     {}, "major", "output 1: (none) -> aux"),
    ("symbol added", {"signature": _signature(symbols=[*BASE_MANIFEST["signature"]["symbols"],
                                                       {"name": "seq", "min": 1, "max": 8}])}, {},
     "major", "symbol seq added"),
    ("target added", {"targets": [CPU, CUDA]}, {}, "minor", "target cuda sm_90 added"),
    ("cuda arch added", {"targets": [CPU, {**CUDA, "archs": [80, 90]}]}, {}, "minor", "target cuda sm_80 added"),
    ("target dropped", {"targets": [CUDA]}, {}, "major", "target cpu x86_64 x86-64-v3 dropped"),
    ("cpu isa raised", {"targets": [{**CPU, "isa": "x86-64-v4"}]}, {}, "major", "dropped"),
    ("weights only", {}, {"tensors": weights(seed=1)}, "patch", "fc.weight: values changed, max abs change"),
    ("weight shape", {}, {"tensors": weights(shapes={"fc.weight": (4, 8), "fc.bias": (5,)})}, "patch",
     "fc.bias: float32[4] -> float32[5]"),
    ("kernels only", {}, {"kernels": b"\x7fELF other kernels"}, "patch", "cpu/x86-64-v3/kernels.so changed"),
    ("plan only", {}, {"program": {"steps": []}}, "patch", "program.json changed"),
    ("producer only", {"producer": {**BASE_MANIFEST["producer"], "torch": "2.14.0"}}, {}, "patch",
     "torch 2.13.0+cpu -> 2.14.0"),
    ("metadata only", {"user_metadata": {"license": "Apache-2.0"}}, {}, "patch", "license: 'MIT' -> 'Apache-2.0'"),
    ("widened and weights", {"signature": _signature(symbols=[{"name": "batch", "min": 1, "max": 128}])},
     {"tensors": weights(seed=2)}, "minor", "widened"),
]


@pytest.mark.parametrize("case, fields, contents, bump, text", CASES, ids=[c[0] for c in CASES])
def test_bump_table(tmp_path, case, fields, contents, bump, text):
    old = read_package(write(tmp_path / "old.aotpack"))
    new = read_package(write(tmp_path / "new.aotpack", changed(**fields), **contents))
    result = diff_packages(old, new)
    assert result.bump == bump, [c.text for c in result.changes]
    if text is None:
        assert result.changes == ()
    else:
        assert any(text in c.text for c in result.changes), [c.text for c in result.changes]


@pytest.mark.parametrize("old, bump, minimum", [
    ("1.2.3", "major", "2.0.0"), ("1.2.3", "minor", "1.3.0"), ("1.2.3", "patch", "1.2.4"), ("1.2.3", "none", "1.2.3"),
    ("0.4.1", "major", "0.5.0"), ("0.4.1", "minor", "0.4.2"), ("0.4.1", "patch", "0.4.2"),
])
def test_minimum_version(old, bump, minimum):
    assert str(minimum_version(parse_version(old), bump)) == minimum


@pytest.mark.parametrize("new_version, ok", [("1.2.3", False), ("1.2.4", False), ("1.3.0", True), ("2.0.0", True),
                                             ("1.3.0-rc.1", False), ("1.2.2", False)])
def test_check_version_exit_status(tmp_path, new_version, ok):
    """A widened range needs a minor bump: the CLI's exit status says whether NEW's version has one."""
    write(tmp_path / "old.aotpack")
    write(tmp_path / "new.aotpack", changed(version=new_version,
                                            signature=_signature(symbols=[{"name": "batch", "min": 1, "max": 128}])))
    result = subprocess.run([sys.executable, "-m", "aotpack.cli", "diff", str(tmp_path / "old.aotpack"),
                             str(tmp_path / "new.aotpack"), "--check-version"], capture_output=True, text=True, check=False)
    assert "minor  range" in result.stdout and "bump: minor" in result.stdout
    assert result.returncode == (0 if ok else 1), result.stderr
    if not ok:
        assert result.stderr.strip() == (f"error: NEW's version {new_version} is too low: the changes need a minor "
                                         "bump from 1.2.3, so at least 1.3.0")


def test_diff_of_two_real_exports(mlp_package, tmp_path):
    """examples/mlp exported again with a wider batch range: a minor change, the plan's sizes with it."""
    from .exports import AOTPACK, MLP, run

    wider = tmp_path / "wider.aotpack"
    exported = run([*AOTPACK, "export", str(MLP), "--dynamic", "batch=1..128", "--version", "1.0.1", "--no-verify",
                    "--meta", "license=MIT", "--meta", "source.revision=0123abc", "-o", str(wider)])
    assert exported.returncode == 0, exported.stderr
    result = run([*AOTPACK, "diff", str(mlp_package), str(wider), "--check-version"])
    assert result.returncode == 1
    assert "minor  range     batch: 1..64 -> 1..128 (widened)" in result.stdout
    assert "patch  plan      program.json changed" in result.stdout  # the arena is planned for the new maximum
    assert "weights" not in result.stdout  # same model file, same weights
    assert result.stderr.strip() == ("error: NEW's version 1.0.1 is too low: the changes need a minor bump from "
                                     "1.0.0, so at least 1.1.0")
