"""Swapping a loaded model's weights in the C runtime (aotpack_model_refit, runtime.Model.refit): a new model
sharing the kernels and plan, so a session sees the old weights or the new, never a mix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import zipfile

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
from aotpack.packages import layout
from aotpack.packages.reader import read_package

from .exports import AOTPACK, MLP, REPO, load_mlp, rel_error, run
from .test_refit import _retrained


@pytest.fixture(scope="module")
def refitted(mlp_package, tmp_path_factory, runtime_build):
    """The MLP retrained, through `aotpack refit --model`: (retrained eager model, the refit package)."""
    tmp = tmp_path_factory.mktemp("runtime-refit")
    model = _retrained()
    weights = tmp / "retrained.safetensors"
    safetensors.torch.save_file(model.state_dict(), str(weights))
    out = tmp / "mlp-refit.aotpack"
    result = run([*AOTPACK, "refit", str(mlp_package), "--weights", str(weights), "--model", str(MLP), "-o", str(out)])
    assert result.returncode == 0, result.stderr
    return model, out


def _rt():
    from aotpack import runtime

    return runtime


def test_retrained_weights_swapped_in_match_eager(mlp_package, refitted):
    rt = _rt()
    retrained, refit_package = refitted
    original = load_mlp()
    new_weights = read_package(refit_package).members[layout.WEIGHTS]  # the package's own layout (*.panels16)
    base = rt.Model(mlp_package)
    old_session = base.session()
    swapped = base.refit(new_weights)
    assert swapped.digest == base.digest and swapped.manifest == base.manifest
    assert swapped.weights_digest == "sha256:" + read_package(refit_package).manifest["members"][layout.WEIGHTS]["sha256"]
    assert base.weights_digest == "sha256:" + read_package(mlp_package).manifest["members"][layout.WEIGHTS]["sha256"]
    assert swapped.weights_digest != base.weights_digest
    from_file = rt.Model(refit_package).session()
    new_session = swapped.session(num_threads=2)
    gen = torch.Generator().manual_seed(3)
    for batch in (1, 17, 64):
        x = torch.randn(batch, 32, generator=gen)
        with torch.no_grad():
            ref, stale = retrained(x).numpy(), original(x).numpy()
        (y,) = new_session.run([x.numpy()])
        assert rel_error(y, ref) <= 1e-5, (batch, rel_error(y, ref))
        np.testing.assert_array_equal(y, from_file.run([x.numpy()])[0])  # the same as the refit package
        (old,) = old_session.run([x.numpy()])  # the base model and its sessions keep their weights
        assert rel_error(old, stale) <= 1e-5 and rel_error(old, ref) > 1e-3
    # The shared parts outlive the model the refit was made from.
    del old_session
    base.close()
    (y,) = new_session.run([np.ones((2, 32), np.float32)])
    with torch.no_grad():
        assert rel_error(y, retrained(torch.ones(2, 32)).numpy()) <= 1e-5
    # A refit of a refit, from a file.
    again = swapped.refit(read_package(mlp_package).members[layout.WEIGHTS])
    assert again.weights_digest == base.weights_digest


def test_mismatched_weights_are_refused_listing_every_mismatch(mlp_package):
    rt = _rt()
    model = rt.Model(mlp_package)
    tensors = safetensors.numpy.load(read_package(mlp_package).members[layout.WEIGHTS])
    bad = dict(tensors)
    del bad["0.bias"]
    bad["2.bias"] = bad["2.bias"][:3]
    bad["4.bias"] = bad["4.bias"].astype(np.float64)
    bad["fc.weight"] = np.zeros((2, 2), np.float32)
    with pytest.raises(rt.AotpackError) as info:
        model.refit(safetensors.numpy.save(bad))
    assert info.value.code == rt.StatusCode.INVALID_ARGUMENT
    assert info.value.message.splitlines() == [
        "the new weights do not fit the package: 4 mismatch(es) with its weights.safetensors:",
        "  0.bias: missing (expected float32[64])",
        "  fc.weight: not in the package (given float32[2, 2])",
        "  2.bias: shape [3], expected [64]",
        "  4.bias: dtype float64, expected float32",
        "  (some package weights are laid out at export, e.g. *.panels16: pass the weights.safetensors that "
        "`aotpack refit --model` writes)",
    ]
    # The model's state-dict names (what training saves) are not the package's layout: the same hint.
    state = {k: v.numpy() for k, v in load_mlp().state_dict().items()}
    with pytest.raises(rt.AotpackError, match=r"0.weight: not in the package \(given float32\[64, 32\]\)"):
        model.refit(safetensors.numpy.save(state))
    for garbage, message in [(b"", "too short for a safetensors file"), (b"\xff" * 64, "safetensors header length"),
                             (safetensors.numpy.save(tensors)[:-5], "run past")]:
        with pytest.raises(rt.AotpackError, match=message) as info:
            model.refit(garbage)
        assert info.value.code == rt.StatusCode.DATA_LOSS
        assert info.value.message.startswith("the new weights: ")
    # The model is untouched by the failures.
    model.session().run([np.ones((1, 32), np.float32)])


def test_concurrent_runs_during_swaps_never_see_a_mix(mlp_package, refitted):
    """Threads run while the main thread swaps the weights back and forth: every output is exactly that of
    the old weights or of the new ones, never of a mix (which would match neither)."""
    rt = _rt()
    base = rt.Model(mlp_package)
    weight_sets = [read_package(mlp_package).members[layout.WEIGHTS],
                   read_package(refitted[1]).members[layout.WEIGHTS]]
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    expected = [base.refit(w).session().run([x])[0] for w in weight_sets]
    assert not np.allclose(expected[0], expected[1])

    current = {"model": base.refit(weight_sets[0]), "index": 0}
    lock = threading.Lock()
    stop = threading.Event()
    seen = [[0, 0] for _ in range(4)]
    failures: list[str] = []

    def worker(k: int) -> None:
        session, which = None, None
        try:
            while not stop.is_set():
                with lock:
                    model, index = current["model"], current["index"]
                if session is None or session._model is not model:
                    session, which = model.session(), index  # a service's swap: new sessions on the new model
                (y,) = session.run([x])
                matches = [np.array_equal(y, e) for e in expected]
                if not any(matches):
                    failures.append(f"thread {k}: an output matching neither weight set")
                    return
                if not matches[which]:
                    failures.append(f"thread {k}: a session of weight set {which} ran the other one")
                    return
                seen[k][which] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(f"thread {k}: {e!r}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        for swap in range(40):
            index = (swap + 1) % 2
            new = base.refit(weight_sets[index])  # made while the old one runs
            with lock:
                current["model"], current["index"] = new, index
            threading.Event().wait(0.005)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not failures, failures
    assert sum(s[0] for s in seen) > 0 and sum(s[1] for s in seen) > 0, seen


def test_a_run_in_progress_keeps_its_weights(mlp_package, refitted):
    """A long run (many threads each on its own session of the old model) while the swap happens: each
    finishes with the old weights; sessions made afterwards run the new."""
    rt = _rt()
    base = rt.Model(mlp_package)
    new_weights = read_package(refitted[1]).members[layout.WEIGHTS]
    x = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
    old_ref = base.session().run([x])[0]
    new_ref = base.refit(new_weights).session().run([x])[0]
    sessions = [base.session() for _ in range(4)]
    results: list[list[np.ndarray]] = [[] for _ in sessions]
    go = threading.Barrier(len(sessions) + 1)

    def worker(k):
        go.wait()
        for _ in range(200):
            results[k].append(sessions[k].run([x])[0])

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(sessions))]
    for t in threads:
        t.start()
    go.wait()
    swapped = base.refit(new_weights)
    fresh = swapped.session().run([x])[0]
    for t in threads:
        t.join()
    np.testing.assert_array_equal(fresh, new_ref)
    assert all(np.array_equal(y, old_ref) for r in results for y in r)


def test_refitted_model_refuses_cuda_sessions(tmp_path, runtime_build):
    """CUDA keeps a package's weights uploaded once per model and device: a refitted model's CUDA session is
    UNSUPPORTED, saying so (checked against the stand-in driver of runtime_cpp/tests/fake_cuda)."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    from aotpack.build import build_package
    from aotpack.exporter import ModelSpec, capture, resolve_symbols
    from aotpack.lowering.frontend.decompositions import decompositions
    from aotpack.lowering.targets import CpuTarget, CudaTarget, Targets

    class Small(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.relu(self.fc(x))

    torch.manual_seed(0)
    net = Small().eval()
    spec = ModelSpec(tmp_path / "model.py", net, (torch.randn(3, 8),), ("x",), {"x": {0: "n"}}, {"n": (1, 16)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    path = build_package(captured, tmp_path / "small.aotpack",
                         targets=Targets(CpuTarget("x86-64-v3"), CudaTarget((90,)))).path
    code = f"""
        import zipfile
        import numpy as np
        from aotpack import runtime as rt
        model = rt.Model({str(path)!r})
        model.session(device="cuda")  # the package itself runs on the (fake) device
        swapped = model.refit(zipfile.ZipFile({str(path)!r}).read("weights.safetensors"))
        swapped.session().run([np.ones((2, 8), np.float32)])  # CPU sessions take the new weights
        try:
            swapped.session(device="cuda")
        except rt.AotpackError as e:
            print(e.code.name, e.message)
        """
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_CUDA_")}
    env["LD_LIBRARY_PATH"] = str(runtime_build / "fake_cuda")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                            cwd=REPO.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("UNSUPPORTED this model's weights were swapped by aotpack_model_refit, which "
                                    "only CPU sessions run so far"), result.stdout
