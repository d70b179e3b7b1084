"""Committed packages of every released format version still load and give their recorded outputs."""

from __future__ import annotations

from pathlib import Path

from aotpack.verification import relative_error
from safetensors.numpy import load_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_format_v1_package_loads_and_reproduces_its_outputs(rt):
    model = rt.Model(FIXTURES / "format_v1" / "mlp.aotpack")
    assert model.manifest["format_version"] == 1
    io = load_file(FIXTURES / "format_v1" / "mlp_io.safetensors")
    (out,) = model.session().run([io["input"]])
    assert relative_error(out, io["output"]) <= 1e-5
