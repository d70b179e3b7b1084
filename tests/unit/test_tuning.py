"""Tuning at export (lowering/backends/cuda/tuning.py) without a GPU: which buckets are tuned, the sizes they
are timed at, that a choice reaches the kernels, grids and buckets of the library, that every candidate
configuration computes the same result (Triton's interpreter), and when --tune is on. The timing itself
runs on a GPU: tests/gpu/test_gpu_tuning.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy
import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.backends.cuda import tuning
from aotpack.lowering.backends.cuda.attention_config import attention_candidates
from aotpack.lowering.backends.cuda.compile import shared_memory_limit
from aotpack.lowering.backends.cuda.matmul_config import matmul_candidates, matmul_config
from aotpack.lowering.backends.cuda.render import TritonRenderer, render_triton_library
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.ir.kernels import AttentionKernel, MatmulKernel
from aotpack.lowering.ir.symbolic import evaluate
from aotpack.lowering.stages import lower
from aotpack.lowering.targets import TargetError, parse_targets
from interpreter import run_in_interpreter  # tests/unit/interpreter.py
from torch import nn
from torch.nn import functional as F
from tuning_stub import LastCandidateTimer  # tests/tuning_stub.py

HERE = Path(__file__).resolve().parent


class Block(nn.Module):
    """Projections and attention over a dynamic batch and sequence: the two tunable families."""

    def __init__(self, dim: int, heads: int = 4):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).split(d, dim=-1))
        return self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d))


def lowered(dim: int, seq_max: int, dtype=torch.float16):
    model = Block(dim).eval().to(dtype)
    x = torch.randn(2, 8, dim, dtype=dtype)
    spec = ModelSpec(HERE / "model.py", model, (x,), ("x",), {"x": {0: "b", 1: "s"}}, {"b": (1, 8), "s": (1, seq_max)})
    plan = resolve_symbols(spec)
    return lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))


def test_symbol_values_fit_the_size_by_lowering_the_widest_range_first():
    b, s = sympy.symbols("b s", integer=True, positive=True)
    ranges = {b: (1, 8), s: (1, 2048)}
    assert tuning.symbol_values(b * s, 16384, ranges) == {b: 8, s: 2048}
    assert tuning.symbol_values(b * s, 1280, ranges) == {b: 8, s: 160}
    assert tuning.symbol_values(b * s, 4, ranges) == {b: 4, s: 1}  # seq at its least, then batch
    assert tuning.symbol_values(s, 600, ranges) == {b: 8, s: 600}  # other symbols stay at their maxima


def test_candidates_put_the_tables_choice_first_and_fit_the_product():
    for m in (1, 16, 200, 2048, 16384):
        candidates = matmul_candidates(m, 768, 768, "bfloat16", 90)
        assert candidates[0] == matmul_config(m, 768, 768, "bfloat16", 90)
        assert len(candidates) == len(set(candidates)) >= 2
        assert all((c.bm == 16) == (m <= 16) and c.bk <= 768 for c in candidates), (m, candidates)
    assert len(matmul_candidates(2048, 768, 768, "float32", 90)) == 1  # float32 keeps the table's tiles
    assert all(c.bm <= 64 for c in attention_candidates(40, 40, 64, False))
    assert len(attention_candidates(2048, 2048, 64, True)) == 1


def test_buckets_of_a_render_are_the_deciding_sizes_it_covers():
    program = lowered(64, 2048)
    renderer = TritonRenderer(program, 90)
    product = next(s for s in program.steps if isinstance(s, MatmulKernel))
    assert renderer.bucket(product) == (8193, 16384)  # the whole-range kernel covers the top bucket
    renderer._cap = (sympy.sympify(product.m), 2048)
    assert renderer.bucket(product) == (513, 2048)
    renderer._cap = (sympy.sympify(product.m), 16)
    assert renderer.bucket(product) == (1, 16)


class PaddedBlock(Block):
    """Block with transformers' integer attention_mask, as BERT takes it: keys where it is 0 are masked."""

    def forward(self, x, attention_mask):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in self.qkv(x).split(d, dim=-1))
        keep = (attention_mask > 0)[:, None, None, :]
        return self.out(F.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).reshape(b, s, d))


def test_a_padding_mask_is_timed_with_every_key_kept():
    # Filled with zeros like other integer buffers, the mask would mask every key, and the kernel would walk every
    # block reading it: the configuration tuned for that path was slower on real, mostly unpadded inputs.
    model = PaddedBlock(64).eval().to(torch.float16)
    x, mask = torch.randn(2, 8, 64, dtype=torch.float16), torch.ones(2, 8, dtype=torch.int64)
    dims = {"x": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"}}
    spec = ModelSpec(HERE / "model.py", model, (x, mask), ("x", "attention_mask"), dims, {"b": (1, 8), "s": (1, 512)})
    plan = resolve_symbols(spec)
    program = lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))
    attention = next(s for s in program.steps if isinstance(s, AttentionKernel))
    mask_buffer = program.inputs[1]
    assert attention.mask is not None and mask_buffer in attention.reads()
    assert tuning._mask_only_buffers(attention) == {mask_buffer}
    assert tuning._mask_only_buffers(next(s for s in lowered(64, 512).steps if isinstance(s, AttentionKernel))) == set()
    assert tuning._mask_only_buffers(next(s for s in program.steps if isinstance(s, MatmulKernel))) == set()


def test_small_kernels_are_not_tuned():
    LastCandidateTimer.jobs = []
    program = lowered(32, 64)
    original = tuning.Timer
    tuning.Timer = LastCandidateTimer
    try:
        tuned = tuning.tuned_library(program, (90,), lambda t: render_triton_library_with(program, t))
    finally:
        tuning.Timer = original
    assert LastCandidateTimer.jobs == []
    assert tuned.source == render_triton_library(program, (90,)).source


def render_triton_library_with(program, tuning_state):
    from aotpack.lowering.codegen.library import render_library

    return render_library(TritonRenderer(program, 90, tuning_state, pdl=True))  # as render_triton_library for sm_90


def test_a_choice_reaches_the_kernel_its_grid_and_its_bucket(monkeypatch):
    LastCandidateTimer.jobs = []
    program = lowered(512, 2048)
    monkeypatch.setattr(tuning, "Timer", LastCandidateTimer)
    table = render_triton_library(program, (90,))
    tuned = tuning.tuned_library(program, (90,), lambda t: render_triton_library_with(program, t))
    families = {type(job.kernel) for job in LastCandidateTimer.jobs}
    assert families == {MatmulKernel, AttentionKernel}, families
    for job in LastCandidateTimer.jobs:
        config, kernel, grid = job.candidates[-1]
        assert len(job.sizes) == 2 and all(v for v in job.sizes)
        assert any(kernel.name == k.name for k in tuned.kernels), f"{kernel.name} chosen but not in the library"
        assert all(kernel.name != k.name for k in table.kernels)
        step = program.steps.index(job.kernel)
        values = job.sizes[0]
        size = evaluate(sympy.sympify(TritonRenderer(program).deciding_size(job.kernel)), values)
        variants = tuned.variants_of(step)
        runs = next((v for v in (variants.variants if variants else ()) if size <= v.upto), None)
        name, launch = (runs.kernel, runs.launch) if runs else (tuned.step_kernels[step], tuned.step_launches[step])
        assert name == kernel.name, f"step {step} at {size} runs {name}, not the tuned {kernel.name}"
        assert [evaluate(g, values) for g in launch] == [evaluate(g, values) for g in grid]
        blocks = dict(kernel.constexprs)
        assert blocks["BM"] == config.bm and blocks["BN"] == config.bn and kernel.num_warps == config.num_warps


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2], sys.argv[2] + "/.."]
from triton_interp import run_program
from test_tuning import Block, lowered, render_triton_library_with
from tuning_stub import LastCandidateTimer
from aotpack.lowering.backends.cuda import tuning
from aotpack.lowering.backends.cuda.render import render_triton_library
tuning.MIN_MICROSECONDS = 0.0  # every bucket tuned, at the sizes the interpreter can run
tuning.Timer = LastCandidateTimer
torch.manual_seed(0)
program = lowered(32, 64)
table = render_triton_library(program, (90,))
tuned = tuning.tuned_library(program, (90,), lambda t: render_triton_library_with(program, t))
weights = {k: v for k, v in program.weights.items()}
report = {"jobs": len(LastCandidateTimer.jobs)}
for s in (1, 9, 40, 64):
    x = torch.randn(2, s, 32, dtype=torch.float16)
    plain, _ = run_program(program, table, [x])
    other, _ = run_program(program, tuned, [x])
    report[str(s)] = float((plain[0].float() - other[0].float()).abs().max() / plain[0].float().abs().max())
print(json.dumps(report))
"""


def test_every_bucket_at_another_configuration_computes_the_same_result_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert report.pop("jobs") >= 4  # products and attention, more than one bucket each
    for seq, err in report.items():
        assert err < 2e-3, f"seq {seq}: tuned and table kernels differ by {err} (relative)"


def test_tune_defaults_to_the_local_gpu_and_refuses_without_one(monkeypatch):
    from aotpack.lowering import targets

    monkeypatch.setattr(targets, "local_cuda_arch", lambda: None)
    assert parse_targets("cuda", "90", "x86-64-v3").cuda.tune is False
    with pytest.raises(TargetError, match="no GPU that torch can use"):
        parse_targets("cuda", "90", "x86-64-v3", tune=True)
    with pytest.raises(TargetError, match="needs --target cuda"):
        parse_targets("cpu", None, "x86-64-v3", tune=True)
    monkeypatch.setattr(targets, "local_cuda_arch", lambda: 90)
    assert parse_targets("cuda", None, "x86-64-v3").cuda.tune is True
    assert parse_targets("cuda", "80,90", "x86-64-v3").cuda.tune is True  # configurations are chosen for sm_90
    assert parse_targets("cuda", "80", "x86-64-v3").cuda.tune is False  # another architecture: the tables
    assert parse_targets("cuda", None, "x86-64-v3", tune=False).cuda.tune is False
    with pytest.raises(TargetError, match="sm_90 and the package's configurations are chosen for sm_80"):
        parse_targets("cuda", "80", "x86-64-v3", tune=True)


def test_a_tuned_package_that_fails_verification_on_the_gpu_points_at_no_tune(tmp_path, monkeypatch):
    pytest.importorskip("triton", reason="cross-compiling CUDA kernels needs Triton (pip install 'aotpack[cuda]')")
    import aotpack
    import aotpack.verification
    from aotpack.lowering import targets
    from aotpack.verification import VerificationError

    def fails_on(device):
        def verify(path, captured, mode):
            raise VerificationError("the exported package does not reproduce the model, so it was not written:\n"
                                    f"  at s=64 (max) on {device}: output 'output': rel err 9e-02", (device,))
        return verify

    monkeypatch.setattr(targets, "local_cuda_arch", lambda: 90)  # as on a machine with an sm_90 GPU
    monkeypatch.setattr(tuning, "Timer", LastCandidateTimer)
    monkeypatch.setattr(aotpack.verification, "verify_package", fails_on("cuda"))
    model = Block(32).eval()
    with pytest.raises(VerificationError, match="tuned on this GPU; if it passes with `--no-tune`") as tuned:
        aotpack.export(model, (torch.randn(2, 8, 32),), tmp_path / "b.aotpack", dynamic_shapes={"x": {1: "s"}},
                       ranges={"s": (1, 64)}, target="cuda", cuda_arch=(90,))
    assert tuned.value.devices == ("cuda",)
    monkeypatch.setattr(aotpack.verification, "verify_package", fails_on("cpu"))
    with pytest.raises(VerificationError) as on_cpu:  # the CPU kernels are not tuned: no hint
        aotpack.export(model, (torch.randn(2, 8, 32),), tmp_path / "b.aotpack", dynamic_shapes={"x": {1: "s"}},
                       ranges={"s": (1, 64)}, target="cpu,cuda", cuda_arch=(90,))
    assert "--no-tune" not in str(on_cpu.value)
    monkeypatch.setattr(aotpack.verification, "verify_package", fails_on("cuda"))
    with pytest.raises(VerificationError) as plain:  # not tuned: the message as before
        aotpack.export(model, (torch.randn(2, 8, 32),), tmp_path / "b.aotpack", dynamic_shapes={"x": {1: "s"}},
                       ranges={"s": (1, 64)}, target="cuda", cuda_arch=(90,), tune=False)
    assert "--no-tune" not in str(plain.value)
    assert not (tmp_path / "b.aotpack").exists()


def test_saved_times_keep_what_exports_beside_this_one_saved(tmp_path):
    import json

    timer = object.__new__(tuning.Timer)  # no GPU here: only the cache file's handling
    timer.path, timer.cache = tmp_path / "tuning" / "gpu.json", {"mine": 0.25}
    timer.path.parent.mkdir()
    timer.path.write_text(json.dumps({"theirs": 0.5}))
    timer.save()
    assert json.loads(timer.path.read_text()) == {"mine": 0.25, "theirs": 0.5}
    assert tuning._read_cache(tmp_path / "missing.json") == {}


def test_a_candidate_some_target_cannot_load_is_not_chosen(tmp_path):
    """Exporting for sm_86 and sm_90 on an sm_90 GPU: a candidate whose block needs more shared memory than
    sm_86 gives one (99 KB) is never the fastest, whatever its time, even from the cache."""
    import triton

    timer = object.__new__(tuning.Timer)  # no GPU here: the cached times and shared memory sizes only
    timer.gpu, timer.triton, timer.arch, timer.shared_limit = "H200", triton, 90, shared_memory_limit((86, 90))
    timer.cache, timer.failures, timer.measured, timer.cached = {}, [], 0, 0
    program = lowered(512, 2048)
    product = next(s for s in program.steps if isinstance(s, MatmulKernel))
    renderer = TritonRenderer(program, 90)
    configs = matmul_candidates(2048, 2304, 512, "bfloat16", 90)
    candidates = [(c, *renderer.render_with(product, c)) for c in configs[:3]]
    values = {s.expr: s.max for s in program.symbols}
    job = tuning.Job(product, tuple(renderer.args(product)), candidates, [values])
    for i, (_, kernel, _) in enumerate(candidates):
        timer.cache[timer._key(kernel, values)] = 1.0 - 0.1 * i  # the last the fastest
        timer.cache[timer._shared_key(kernel)] = 150_000.0 if i == 2 else 90_000.0
    totals = timer.times(job)
    assert totals[:2] == [1.0, 0.9] and totals[2] == float("inf")
    assert "more than a target architecture gives (101376)" in timer.failures[0]
    assert shared_memory_limit((90,)) == 232448 and shared_memory_limit((75,)) is None
    # the table's choice (the first) over the limit is not chosen either: a fitting candidate is, however slow
    timer.cache[timer._shared_key(candidates[0][1])] = 150_000.0
    timer.failures.clear()
    assert timer.times(job) == [float("inf"), 0.9, float("inf")]
    assert len(timer.failures) == 2


def test_a_candidate_whose_output_differs_from_the_tables_is_not_chosen(tmp_path):
    """A candidate that computes something else (a miscompiled tile, a wrong mask) is never chosen, however fast:
    each candidate's output is compared with the table's configuration's on the same buffers before it is
    timed, also when the table's own time came from the cache (its output is made again). Rounding-sized
    differences (another summation order) are not differences. The launches are stand-ins writing CPU tensors."""
    from types import SimpleNamespace

    timer = object.__new__(tuning.Timer)  # no GPU here: launches and clocks are stand-ins
    timer.gpu, timer.arch, timer.shared_limit, timer.compiled = "H200", 90, None, {}
    timer.cache, timer.failures, timer.mismatches, timer.measured, timer.cached = {}, [], [], 0, 0
    timer.torch = SimpleNamespace(cuda=SimpleNamespace(synchronize=lambda: None))
    timer.triton = SimpleNamespace(__version__="3.6.0", testing=SimpleNamespace(
        do_bench=lambda launch, **_: (launch(), 1.0 - 0.1 * launched[-1])[1]))  # the later, the faster
    program = lowered(512, 2048)
    product = next(s for s in program.steps if isinstance(s, MatmulKernel))
    renderer = TritonRenderer(program, 90)
    candidates = [(c, *renderer.render_with(product, c))
                  for c in matmul_candidates(2048, 2304, 512, "bfloat16", 90)[:4]]
    values = {s.expr: s.max for s in program.symbols}
    job = tuning.Job(product, tuple(renderer.args(product)), candidates, [values])
    truth = torch.randn(64, 48)
    # candidate 1 off by an element's size at one place, 2 off by rounding, 3 with a NaN the table has not
    outputs = [truth, truth.clone().index_put_((torch.tensor(3), torch.tensor(5)), torch.tensor(9.0)),
               truth * (1 + 1e-3), truth.clone().index_put_((torch.tensor(0), torch.tensor(0)), torch.tensor(float("nan")))]
    launched: list[int] = []

    def launcher(kernel, grid, values, buffers):
        i = next(i for i, (_, k, _) in enumerate(candidates) if k is kernel)
        return lambda: (launched.append(i), buffers[-1].copy_(outputs[i]))

    timer._launcher = launcher
    timer._buffer = lambda name, values, mask_only=False: torch.zeros(64, 48)
    totals = timer.times(job)
    assert totals[0] == 1.0 and totals[2] == pytest.approx(0.8)
    assert totals[1] == totals[3] == float("inf")
    assert [f.split(" ")[0] for f in timer.mismatches] == [candidates[1][1].name, candidates[3][1].name]
    assert "bm=" in timer.mismatches[0] and "): largest difference" in timer.mismatches[0]
    assert "NaN or infinity" in timer.mismatches[1] and timer.failures == []
    # the table's time cached, the others not: its output is made again (one launch, untimed) to compare with
    for _, kernel, _ in candidates[1:]:
        del timer.cache[timer._key(kernel, values)]
    launched.clear()
    timer.mismatches.clear()
    assert timer.times(job)[1:] == [float("inf"), pytest.approx(0.8), float("inf")]
    assert launched[0] == 0 and launched.count(0) == 1 and len(timer.mismatches) == 2
