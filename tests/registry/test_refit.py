"""`aotpack refit`: retrained weights into an exported package, run through the C++ runtime."""

from __future__ import annotations

import json

import pytest
import safetensors.torch
import torch
from aotpack.packages import layout
from aotpack.packages.reader import read_package
from tuning_stub import LastCandidateTimer  # tests/tuning_stub.py

from .exports import AOTPACK, MLP, load_mlp, rel_error, run


def _retrained(steps: int = 20) -> torch.nn.Module:
    """examples/mlp trained a little further on a random regression task: every weight moves."""
    model = load_mlp().train()
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 32, generator=gen), torch.randn(64, 10, generator=gen)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return model.eval()


def test_retrained_weights_round_trip_through_the_runtime(mlp_package, tmp_path, runtime_build):
    from aotpack import runtime

    model = _retrained()
    original = load_mlp()
    assert all(not torch.equal(a, b) for a, b in zip(model.state_dict().values(), original.state_dict().values()))
    weights = tmp_path / "retrained.safetensors"
    safetensors.torch.save_file(model.state_dict(), str(weights))
    out = tmp_path / "mlp-refit.aotpack"
    result = run([*AOTPACK, "refit", str(mlp_package), "--weights", str(weights), "--model", str(MLP), "-o", str(out)])
    assert result.returncode == 0, result.stderr
    assert "mlp 1.0.1" in result.stdout and "verified against PyTorch at" in result.stdout

    old, new = read_package(mlp_package), read_package(out)
    assert new.manifest["version"] == "1.0.1" and new.manifest["refit"] == {"from": old.digest}
    assert new.manifest["verification"]["passed"] is True
    assert new.manifest["user_metadata"] == old.manifest["user_metadata"]
    # Same kernels and plan, byte for byte; only the weights differ.
    assert {n: d for n, d in new.members.items() if n != layout.WEIGHTS} == \
        {n: d for n, d in old.members.items() if n != layout.WEIGHTS}
    assert new.members[layout.WEIGHTS] != old.members[layout.WEIGHTS]

    session = runtime.Model(out).session()
    gen = torch.Generator().manual_seed(7)
    for batch in (1, 17, 64):
        x = torch.randn(batch, 32, generator=gen)
        (y,) = session.run([x.numpy()])
        with torch.no_grad():
            ref, stale = model(x).numpy(), original(x).numpy()
        assert y.shape == ref.shape and rel_error(y, ref) <= 1e-5, (batch, rel_error(y, ref))
        assert rel_error(y, stale) > 1e-3  # the retrained weights are the ones that run

    diffed = run([*AOTPACK, "diff", str(mlp_package), str(out), "--check-version", "--json"])
    assert diffed.returncode == 0, diffed.stderr
    report = json.loads(diffed.stdout)
    assert report["bump"] == "patch" and {c["what"] for c in report["changes"]} == {"weights"}


def test_package_named_weights_refit_without_the_model(mlp_package, tmp_path):
    """Without --model the weights are the package's own tensors; the same ones give the same member."""
    package = read_package(mlp_package)
    weights = tmp_path / "same.safetensors"
    weights.write_bytes(package.members[layout.WEIGHTS])
    out = tmp_path / "same.aotpack"
    result = run([*AOTPACK, "refit", str(mlp_package), "--weights", str(weights), "-o", str(out),
                  "--version", "1.0.0-refit.1"])
    assert result.returncode == 0, result.stderr
    assert "not verified (pass --model" in result.stdout
    refitted = read_package(out)
    assert "verification" not in refitted.manifest  # the old record was about the old weights
    assert refitted.members == package.members and refitted.manifest["version"] == "1.0.0-refit.1"


def test_every_mismatch_is_listed(mlp_package, tmp_path):
    state = {k: v.clone() for k, v in load_mlp().state_dict().items()}
    state["0.bias"] = state["0.bias"].double()          # dtype
    state["2.weight"] = torch.randn(64, 63)              # shape
    del state["4.bias"]                                  # missing
    state["extra.weight"] = torch.randn(3)               # unknown
    weights = tmp_path / "bad.safetensors"
    safetensors.torch.save_file(state, str(weights))
    out = tmp_path / "never.aotpack"
    result = run([*AOTPACK, "refit", str(mlp_package), "--weights", str(weights), "--model", str(MLP), "-o", str(out)])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    for line in ("4 mismatch(es)", "0.bias: dtype float64, expected float32", "2.weight: shape [64, 63], expected [64, 64]",
                 "4.bias: missing (expected float32[10])", "extra.weight: not a parameter or buffer of the model"):
        assert line in result.stderr, result.stderr
    assert not out.exists()


def test_model_named_weights_without_the_model_are_refused_with_a_hint(mlp_package, tmp_path):
    weights = tmp_path / "state.safetensors"
    safetensors.torch.save_file(load_mlp().state_dict(), str(weights))
    result = run([*AOTPACK, "refit", str(mlp_package), "--weights", str(weights), "-o", str(tmp_path / "x.aotpack")])
    assert result.returncode == 1
    assert "0.weight.panels16: missing (expected float32[4, 32, 16])" in result.stderr
    assert "0.weight: not in the package (given float32[64, 32])" in result.stderr
    assert "--model model.py" in result.stderr


@pytest.mark.parametrize("version", ["banana", "1.0"])
def test_refit_version_must_be_semver(mlp_package, tmp_path, version):
    weights = tmp_path / "same.safetensors"
    weights.write_bytes(read_package(mlp_package).members[layout.WEIGHTS])
    result = run([*AOTPACK, "refit", str(mlp_package), "--weights", str(weights), "-o", str(tmp_path / "x.aotpack"),
                  "--version", version])
    assert result.returncode == 1 and "is not a semantic version" in result.stderr


def test_refit_of_a_bf16_export_with_the_same_dtype(tmp_path, runtime_build):
    """A package exported with --dtype bf16 takes float32 training weights with refit --dtype bf16."""
    from aotpack import runtime
    from aotpack.verification import from_runtime, to_numpy

    package = tmp_path / "mlp-bf16.aotpack"
    exported = run([*AOTPACK, "export", str(MLP), "--dynamic", "batch=1..16", "--dtype", "bf16", "--version", "1.0.0",
                    "-o", str(package)])
    assert exported.returncode == 0, exported.stderr
    model = _retrained(steps=5)
    weights = tmp_path / "retrained.safetensors"
    safetensors.torch.save_file(model.state_dict(), str(weights))
    out = tmp_path / "refit.aotpack"
    refused = run([*AOTPACK, "refit", str(package), "--weights", str(weights), "--model", str(MLP), "-o", str(out)])
    assert refused.returncode == 1 and "pass the same --dtype to refit" in refused.stderr
    done = run([*AOTPACK, "refit", str(package), "--weights", str(weights), "--model", str(MLP), "--dtype", "bf16",
                "-o", str(out)])
    assert done.returncode == 0, done.stderr
    assert read_package(out).manifest["verification"]["passed"] is True
    x = torch.randn(9, 32, generator=torch.Generator().manual_seed(4))
    (y,) = runtime.Model(out).session().run([to_numpy(x.bfloat16())])
    with torch.no_grad():
        ref = model(x).numpy()
    assert rel_error(from_runtime(y, torch.bfloat16), ref) <= 2e-2  # bfloat16's 8 bits of mantissa


def test_a_tuned_cuda_package_refits_with_the_model(tmp_path, monkeypatch, runtime_build):
    """Tuning chose other configurations than refit's lowering (the tables) renders: refit compares the
    kernels up to their configurations and keeps the package's cubins."""
    pytest.importorskip("triton", reason="cross-compiling CUDA kernels needs Triton (pip install 'aotpack[cuda]')")
    import aotpack.api
    from aotpack.lowering import targets
    from aotpack.lowering.backends.cuda import tuning
    from aotpack.refit import refit_package

    monkeypatch.setattr(targets, "local_cuda_arch", lambda: 90)  # as on a machine with an sm_90 GPU
    monkeypatch.setattr(tuning, "Timer", LastCandidateTimer)
    monkeypatch.setattr(tuning, "MIN_MICROSECONDS", 0.0)  # the small model's products are tuned too
    package = tmp_path / "mlp.aotpack"
    options = {"dynamic": ["batch=1..64"], "target": "cpu,cuda", "cuda_arch": "90", "dtype": "bf16"}  # half: tunable
    aotpack.api.export_model_file(MLP, package, **options)
    tuned = read_package(package)
    assert next(t for t in tuned.manifest["targets"] if t["kind"] == "cuda")["configurations"] == "tuned"
    monkeypatch.setattr(targets, "local_cuda_arch", lambda: None)
    tables = tmp_path / "tables.aotpack"
    aotpack.api.export_model_file(MLP, tables, **options)
    assert read_package(tables).members[layout.CUDA_SOURCE] != tuned.members[layout.CUDA_SOURCE]

    weights = tmp_path / "retrained.safetensors"
    safetensors.torch.save_file(_retrained(steps=3).state_dict(), str(weights))
    out = tmp_path / "refit.aotpack"
    manifest = refit_package(package, weights, out, model_file=MLP, dtype="bf16")
    assert manifest["verification"]["passed"] is True
    new = read_package(out)
    assert {n: d for n, d in new.members.items() if n != layout.WEIGHTS} == \
        {n: d for n, d in tuned.members.items() if n != layout.WEIGHTS}


GATED_MODEL = """
import torch

class Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(32, 48, bias=False)
        self.up = torch.nn.Linear(32, 48, bias=False)
        self.down = torch.nn.Linear(48, 32, bias=False)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))

torch.manual_seed(0)
model = Gated().eval()
example_inputs = (torch.randn(3, 32),)
dynamic_axes = {"x": {0: "batch"}}
dynamic_ranges = {"batch": (1, 8)}
"""


def test_a_gated_mlps_paired_weight_is_named_apart_and_refit_without_the_model_says_so(tmp_path):
    """The gate and up projections run as one product over their interleaved weights (ir/paired_products.py),
    stored as up.weight+gate.weight.paired: the model's own tensors do not fit it, and the refusal says why."""
    model_file = tmp_path / "gated.py"
    model_file.write_text(GATED_MODEL)
    package = tmp_path / "gated.aotpack"
    assert run([*AOTPACK, "export", str(model_file), "-o", str(package), "-q"]).returncode == 0
    namespace: dict = {}
    exec(compile(GATED_MODEL, "gated.py", "exec"), namespace)  # noqa: S102 - the test's own model source
    weights = tmp_path / "state.safetensors"
    safetensors.torch.save_file(namespace["model"].state_dict(), str(weights))
    result = run([*AOTPACK, "refit", str(package), "--weights", str(weights), "-o", str(tmp_path / "x.aotpack")])
    assert result.returncode == 1
    assert "up.weight+gate.weight.paired.panels16: missing" in result.stderr, result.stderr
    assert "gate.weight: not in the package (given float32[48, 32])" in result.stderr
    assert "a gated MLP's *.paired" in result.stderr and "give the model's own parameters with --model model.py" in result.stderr
