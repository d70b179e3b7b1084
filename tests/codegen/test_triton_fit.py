"""Kernels rendered smaller when their compiled blocks need more shared memory than a target gives
(lowering/backends/cuda/fit.py), cross-compiled on this machine, which has no GPU: the export goes on with the
smaller kernel in every later stage, and fails with a clear message only when nothing smaller fits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from tuning_stub import LastCandidateTimer  # tests/tuning_stub.py

triton = pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")

from aotpack import progress
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.backends.cuda import compile as cuda_compile
from aotpack.lowering.backends.cuda import tuning
from aotpack.lowering.backends.cuda.attention_config import AttentionConfig, smaller_attention_config
from aotpack.lowering.backends.cuda.compile import TritonCompileError
from aotpack.lowering.backends.cuda.matmul_config import MatmulConfig, smaller_matmul_config
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.stages import run_stages
from aotpack.lowering.targets import CudaTarget, Targets

HERE = Path(__file__).resolve().parent


class Projection(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 128)

    def forward(self, x):
        return self.linear(x)


def _captured():
    """A bf16 nn.Linear over 1..64 rows: a product with a bias epilogue, a variant for 1..16 rows and the
    step's own kernel above."""
    model = Projection().eval().to(torch.bfloat16)
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    spec = ModelSpec(HERE / "model.py", model, (x,), ("x",), {"x": {0: "s"}}, {"s": (1, 64)})
    plan = resolve_symbols(spec)
    return capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())


def _export(captured, tune: bool = False):
    """The stages for sm_90, from the tables or tuned, and the notes they printed."""
    lines: list[str] = []
    with progress.reporting(progress.Progress(lines.append)):
        state = run_stages(captured, Targets(None, CudaTarget((90,), tune)))
    return state, [line for line in lines if "shared memory" in line]


def _products(state) -> dict[str, tuple[MatmulConfig, int]]:
    """Each product kernel of the CUDA library: its configuration and its compiled shared memory on sm_90."""
    artifacts = state.artifacts["cuda"]
    return {k.name: (k.config, artifacts.binaries[90].kernels[k.name].shared)
            for k in artifacts.library.kernels if k.family == "matmul"}


def _chain(config, smaller=smaller_matmul_config) -> list:
    """`config` and every smaller configuration after it, in the order the compile stage tries them: a smaller
    tile starts again at the stages `config` had."""
    chain = [config]
    while (config := smaller(config, chain[0].num_stages)) is not None:
        chain.append(config)
    return chain


def _smaller(small: MatmulConfig, large: MatmulConfig) -> bool:
    """Whether `small` came from `large` by fewer stages or a smaller tile."""
    tile = (small.bm * small.bn * small.bk, small.num_stages)
    return tile < (large.bm * large.bn * large.bk, large.num_stages) and small.bm <= large.bm and small.bn <= large.bn


def test_a_kernel_over_the_limit_is_rendered_smaller_and_the_export_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    captured = _captured()
    table, notes = _export(captured)
    assert not notes
    before = _products(table)
    assert len(before) == 2, before  # the 1..16 rows' variant and the step's own kernel
    largest = max(shared for _, shared in before.values())
    limit = largest - 1  # below what the table's largest block needs
    monkeypatch.setitem(cuda_compile.SHARED_MEMORY_PER_BLOCK, 90, limit)

    fitted, notes = _export(captured)
    after = _products(fitted)
    assert all(shared <= limit for _, shared in after.values()), after
    over = {name for name, (_, shared) in before.items() if shared > limit}
    assert over and not over & set(after), "the kernels over the limit are gone from the library"
    # Each configuration over the limit was replaced by one down its chain of smaller ones, tried in turn: with
    # the whole depth in one BK step, fewer stages do not help this product, so its tile shrinks after them.
    originals = [c for name, (c, _) in before.items() if name in over]
    replaced = [c for name, (c, _) in after.items() if name not in before]
    assert len(replaced) == len(originals) == 1
    chain = _chain(originals[0])
    assert replaced[0] in chain[1:] and _smaller(replaced[0], originals[0]), (replaced, originals)
    assert len(notes) == chain.index(replaced[0]), notes  # a note per configuration that did not fit
    assert "more than sm_90 gives one" in notes[0] and "step 0 (s 17..64)" in notes[0], notes
    first = originals[0]
    assert notes[0].endswith(f"rendered again at {first.bm} x {first.bn} x {first.bk}, {first.num_warps} warps, "
                             f"{first.num_stages - 1} stages"), notes

    # Later stages package the library as compiled: program.json's kernels and steps name the smaller kernel.
    library = fitted.artifacts["cuda"].library
    section = fitted.program_json["cuda"]
    assert [k["name"] for k in section["kernels"]] == [k.name for k in library.kernels]
    named = {v["kernel"] for step in section["steps"] for v in [step, *step.get("variants", {}).get("buckets", [])]}
    assert named <= set(after) and not named & over
    backend = fitted.backends[0]
    members = backend.package_members(fitted.artifacts["cuda"])
    assert all(name not in path for path in members for name in over)

    # Byte-reproducible: the same again gives the same library and the same members.
    again, _ = _export(captured)
    assert again.artifacts["cuda"].library == library
    assert backend.package_members(again.artifacts["cuda"]) == members
    assert again.program_json == fitted.program_json


def test_a_tuned_library_keeps_its_choices_where_it_renders_a_kernel_smaller(tmp_path, monkeypatch):
    """The compile stage renders the program again as the render stage did, tuning included (its times come
    from the cache on a GPU; here a stand-in chooses every bucket's last candidate)."""
    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "Timer", LastCandidateTimer)
    monkeypatch.setattr(tuning, "MIN_MICROSECONDS", 0.0)  # every bucket of the small product tuned
    captured = _captured()
    tuned, _ = _export(captured, tune=True)
    table, _ = _export(captured)
    before = _products(tuned)
    assert set(before) != set(_products(table)), "tuning chose other configurations than the tables"
    limit = max(shared for _, shared in before.values()) - 1
    monkeypatch.setitem(cuda_compile.SHARED_MEMORY_PER_BLOCK, 90, limit)

    fitted, notes = _export(captured, tune=True)
    after = _products(fitted)
    over = {name for name, (_, shared) in before.items() if shared > limit}
    assert notes and over and all(shared <= limit for _, shared in after.values()), after
    assert set(before) - over <= set(after), "the tuned kernels that fit are kept"
    for name in set(after) - set(before):
        assert any(after[name][0] in _chain(before[o][0])[1:] for o in over), after[name]


def test_a_limit_no_configuration_fits_fails_with_what_where_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(cuda_compile.SHARED_MEMORY_PER_BLOCK, 90, 1)
    with pytest.raises(TritonCompileError) as error:
        _export(_captured())
    message = str(error.value)
    assert "the matmul kernel of step 0" in message, message
    assert "bytes of shared memory per block at 16 x 16 x 16" in message and "2 stages" in message
    assert "more than sm_90 GPUs give one (1), and has no smaller configuration" in message
    assert "export without sm_90 in --cuda-arch" in message


def test_the_next_smaller_configuration_takes_a_stage_then_a_tile_then_depth():
    chain = _chain(MatmulConfig(128, 256, 64, 8, 8, 3))
    assert [(c.bm, c.bn, c.bk, c.num_warps, c.num_stages) for c in chain] == [
        (128, 256, 64, 8, 3), (128, 256, 64, 8, 2), (128, 128, 64, 8, 3), (128, 128, 64, 8, 2), (64, 128, 64, 4, 3),
        (64, 128, 64, 4, 2), (64, 64, 64, 4, 3), (64, 64, 64, 4, 2), (32, 64, 64, 4, 3), (32, 64, 64, 4, 2),
        (32, 32, 64, 4, 3), (32, 32, 64, 4, 2), (16, 32, 64, 4, 3), (16, 32, 64, 4, 2), (16, 16, 64, 4, 3),
        (16, 16, 64, 4, 2), (16, 16, 32, 4, 3), (16, 16, 32, 4, 2), (16, 16, 16, 4, 3), (16, 16, 16, 4, 2)]
    assert smaller_matmul_config(MatmulConfig(64, 64, 64, 8, 4, 2)) == MatmulConfig(32, 64, 64, 8, 4, 2)
    split = MatmulConfig(16, 32, 128, 8, 4, 4, split_k=4)
    assert smaller_matmul_config(split) == MatmulConfig(16, 32, 128, 8, 4, 3, split_k=4)
    persistent = MatmulConfig(128, 256, 64, 8, 8, 2, persistent=True)
    assert smaller_matmul_config(persistent, 4) == MatmulConfig(128, 128, 64, 8, 8, 4, persistent=True)

    chain = _chain(AttentionConfig(128, 64, 8, 3), smaller_attention_config)
    assert [(c.bm, c.bn, c.num_warps, c.num_stages) for c in chain] == [
        (128, 64, 8, 3), (128, 64, 8, 2), (64, 64, 4, 3), (64, 64, 4, 2), (64, 32, 4, 3), (64, 32, 4, 2),
        (32, 32, 4, 3), (32, 32, 4, 2), (32, 16, 4, 3), (32, 16, 4, 2), (16, 16, 4, 3), (16, 16, 4, 2)]
