"""Every corrupted package is a clean error: one line, exit code 1, no signal (issue 13's corpus, in the suite).

The package is exported from examples/mlp through the real pipeline; tests/runtime/corrupt_packages.py makes
its mutants, each run through aotpack-run in its own process, at the symbols' maxima (the default) and minima.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from corrupt_packages import mutants

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def exported_mlp(runtime_build, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "mlp.aotpack"
    subprocess.run(
        [sys.executable, "-m", "aotpack.cli", "export", str(REPO / "examples" / "mlp" / "model.py"),
         "--dynamic", "batch=1..8", "-o", str(out)],
        check=True, capture_output=True, timeout=600,
    )
    return out


def run_tool(runtime_build: Path, path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(runtime_build / "aotpack-run"), str(path), "--repeat", "0", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_exported_package_runs(runtime_build, exported_mlp):
    for sym in ("batch=1", "batch=8"):
        result = run_tool(runtime_build, exported_mlp, "--sym", sym)
        assert result.returncode == 0, result.stderr


def test_every_mutant_is_a_clean_one_line_error(runtime_build, exported_mlp, tmp_path):
    found = mutants(exported_mlp.read_bytes())
    kinds = {m.kind for m in found}
    assert {"kernel=abort", "kernel=exit", "kernel=free", "args emptied", "output pointed at a weight",
            "output shrunk in plan and signature", "steps: []", "arena_bytes = 2^31", "overlapping live buffers",
            "weight offsets outside the data", "kernels.so truncated to 63 bytes", "written argument aliases a read one"} <= kinds
    failures = []
    for i, m in enumerate(found):
        path = tmp_path / f"m{i}.aotpack"
        path.write_bytes(m.data)
        for sym in ("batch=8", "batch=1"):
            result = run_tool(runtime_build, path, "--sym", sym)
            lines = result.stderr.splitlines()
            clean = (result.returncode == 1 and len(lines) == 1 and lines[0].startswith("aotpack-run: ")
                     and m.expect in lines[0])
            if not clean:
                failures.append(f"{m.kind} (--sym {sym}): exit {result.returncode}, stderr {result.stderr[-600:]!r}")
        path.unlink()
    assert not failures, "\n".join(failures)
