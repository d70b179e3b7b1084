"""The pipeline is built from the backends of a package's targets (lowering/stages.py)."""

from __future__ import annotations

from aotpack.cli import main
from aotpack.lowering.backends import BACKENDS, backends_for
from aotpack.lowering.stages import stage_names
from aotpack.lowering.targets import CpuTarget, CudaTarget, Targets
from click.testing import CliRunner

CPU = CpuTarget("x86-64-v3")
CUDA = CudaTarget((90,))


def test_each_target_brings_its_own_stages():
    assert stage_names(Targets(CPU, None)) == (
        "lower", "prepack_weights", "plan_memory", "render_cpp", "compile_cpp", "serialize")
    # no CPU target: no CPU panels; the CUDA layout pass stores [K, N] weights [N, K] (backends/cuda/weight_layout.py)
    assert stage_names(Targets(None, CUDA)) == (
        "lower", "transpose_kn_weights", "plan_memory", "render_triton", "compile_triton", "serialize")
    assert stage_names(Targets(CPU, CUDA)) == (
        "lower", "prepack_weights", "transpose_kn_weights", "plan_memory", "render_cpp", "compile_cpp", "render_triton",
        "compile_triton", "serialize")


def test_backends_follow_the_targets_cpu_first():
    assert [b.kind for b in backends_for(Targets(CPU, CUDA))] == ["cpu", "cuda"]
    assert [b.target for b in backends_for(Targets(None, CUDA))] == [CUDA]
    assert set(BACKENDS) == {"cpu", "cuda"}


def test_export_help_names_every_stage():
    help_text = " ".join(CliRunner().invoke(main, ["export", "--help"]).output.split())
    for name in stage_names(Targets(CPU, CUDA)):
        assert name in help_text, f"`aotpack export --help` does not mention the stage {name}"
