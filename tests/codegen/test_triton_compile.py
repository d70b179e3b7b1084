"""Cross-compilation of the rendered Triton kernels to cubins on this machine, which has no GPU.

Also runs the examples' Triton kernels in Triton's interpreter (on the CPU, with numpy) against eager
PyTorch, so the templates' arithmetic is checked where there is no GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_golden import CASES

triton = pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")

from aotpack.lowering.backends.cuda.compile import compile_triton_library
from aotpack.lowering.backends.cuda.render import render_triton_library

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_compiles_to_cubins_without_a_gpu(case, tmp_path, monkeypatch):
    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    library = render_triton_library(CASES[case])
    compiled = compile_triton_library(library, (80, 90))
    for result in compiled.values():
        assert set(result.kernels) == {k.name for k in library.kernels}
        for kernel in result.kernels.values():
            assert kernel.cubin[:4] == b"\x7fELF", "a cubin is an ELF image"
            assert kernel.name in {k.name for k in library.kernels} and kernel.num_warps >= 1
            assert kernel.global_scratch_size == 0 and kernel.profile_scratch_size == 0
        assert result.min_cuda_driver in (12000, 13000) and result.ptx_version
    # A second compile comes from the cache, identical.
    again = compile_triton_library(library, (90,))
    assert {k: v.cubin for k, v in again[90].kernels.items()} == {k: v.cubin for k, v in compiled[90].kernels.items()}



def test_cache_is_per_kernel(tmp_path, monkeypatch):
    """A library that differs from a compiled one in one kernel compiles only that kernel."""
    import dataclasses

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    one, two = (render_triton_library(CASES[name]) for name in ("pointwise_broadcast_fused", "reduction_argmax"))
    kernels = one.kernels + two.kernels
    library = dataclasses.replace(one, kernels=kernels,
                                  source=one.prelude + "\n" + "\n".join(k.source for k in kernels))
    compile_triton_library(library, (90,))
    cubins = set((tmp_path / "cuda").glob("*.cubin"))
    assert len(cubins) == len(library.kernels)
    first = library.kernels[0]
    changed = dataclasses.replace(first, source=first.source + "\n# changed\n")
    edited = dataclasses.replace(library, source=library.source.replace(first.source, changed.source),
                                 kernels=(changed, *library.kernels[1:]))
    compile_triton_library(edited, (90,))
    assert len(set((tmp_path / "cuda").glob("*.cubin")) - cubins) == 1


INTERPRET = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from triton_interp import run_program
from aotpack.build import capture_model_file
from aotpack.lowering.stages import lower
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.verification import relative_error
captured = capture_model_file(sys.argv[2])
program = lower(captured)
torch.manual_seed(0)
inputs = [torch.randn(x.shape).to(x.dtype) if x.is_floating_point() else x for x in captured.example_inputs]
with torch.no_grad():
    ref = captured.program.module()(*inputs)
ref = ref if isinstance(ref, (list, tuple)) else [ref]
outs, errors = run_program(program, render_triton_library(program), inputs)
print(json.dumps({"errors": errors, "rel": [relative_error(o.float().numpy(), r.float().numpy()) for o, r in zip(outs, ref)]}))
"""


@pytest.mark.parametrize("model", ["examples/mlp", "examples/transformer_block", "tests/e2e/row_models/prenorm",
                                   "tests/e2e/row_models/folded_norms", "tests/e2e/row_models/residual_sum",
                                   "tests/e2e/op_models/size_arithmetic", "tests/e2e/op_models/large_windows",
                                   "tests/e2e/op_models/conv_transposed", "tests/e2e/op_models/order_statistics",
                                   "tests/e2e/op_models/embedding_bags", "tests/e2e/op_models/antialias"])
def test_example_kernels_match_eager_in_the_triton_interpreter(model):
    """Row kernels feeding products: the transformer block's layer norms, prenorm.py's gathered embedding
    and its layer norm, an RMS norm two products read and a softmax into a product, folded_norms.py's pre-norm,
    post-norm and tied-embedding norms, residual_sum.py's residual sum read by a norm and by an epilogue, in
    batch x seq rows; size_arithmetic.py's float and bool arithmetic on a size; large_windows.py's pooling windows
    as reductions; conv_transposed.py's transposed convolutions; order_statistics.py's medians, running folds
    and binary searches; embedding_bags.py's bags found by binary search and folded by scatters;
    antialias.py's antialiased resizing, its windows' positions computed from the sizes."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # must be set before anything imports Triton
    path = REPO / f"{model}.py" if model.startswith("tests") else REPO / model / "model.py"
    result = subprocess.run([sys.executable, "-c", INTERPRET, str(HERE), str(path)],
                            check=False, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["errors"] and all(r <= 1e-5 for r in report["rel"]), report


ATTENTION = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from test_attention import HERE, _pad, attention_model
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.backends.cuda.render import render_triton_library
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.verification import relative_error
report = {}
for name in sys.argv[3].split(","):
    torch.manual_seed(0)
    model = attention_model(name)
    spec = ModelSpec(HERE, model, (torch.randn(2, 8, 16), _pad(2, 8)), ("x", "pad"),
                     {"x": {1: "seq"}, "pad": {1: "seq"}}, {"seq": (1, 80)})
    plan = resolve_symbols(spec)
    program = GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run()
    assert any(step.family == "attention" for step in program.steps)
    report[f"{name} causal"] = [str(s.causal_offset) for s in program.steps if s.family == "attention" and s.causal]
    library = render_triton_library(program)
    report[f"{name} folds"] = "(safe_max * " in library.source  # the scale in the exponential's multiply-add
    for seq in (1, 70):
        inputs = [torch.randn(2, seq, 16), _pad(2, seq)]
        with torch.no_grad():
            ref = model(*inputs)
        outs, errors = run_program(program, library, inputs)
        report[f"{name} seq {seq}"] = (errors, relative_error(outs[0].numpy(), ref.numpy()))
print(json.dumps(report))
"""


def test_attention_kernel_matches_eager_in_the_triton_interpreter():
    """Masks (boolean padding, every key masked), grouped-query heads and a head dim of 80 (blocks of 128). A
    boolean mask reaches the lowering as where(mask, 0, -inf) and is selected by, so the scale folds."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cases = "padding_bool,all_masked_rows,gqa_causal_dim80"
    result = subprocess.run([sys.executable, "-c", ATTENTION, str(HERE), str(HERE.parent / "e2e"), cases],
                            check=False, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert all(v for k, v in report.items() if k.endswith(" folds")), report
    runs = {k: v for k, v in report.items() if " seq " in k}
    assert len(runs) == 6 and all(not errors and rel <= 1e-5 for errors, rel in runs.values()), report


def test_causal_diagonals_of_masks_built_from_positions_in_the_triton_interpreter():
    """Masks built from aranges (tests/e2e/test_attention.py's POSITION_CASES) become causal kernels with their
    diagonal off the main one (2, -1 with padding, seq past a memory of keys): the key blocks the Triton kernel
    skips and the edge blocks it masks, across two row blocks (seq 70, blocks of 64), against eager."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cases = "diagonal_plus_2,diagonal_minus_1_padding,keys_past_a_memory"
    result = subprocess.run([sys.executable, "-c", ATTENTION, str(HERE), str(HERE.parent / "e2e"), cases],
                            check=False, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert {k: v for k, v in report.items() if k.endswith(" causal")} == {
        "diagonal_plus_2 causal": ["2"], "diagonal_minus_1_padding causal": ["-1"], "keys_past_a_memory causal": ["seq"]}
    runs = {k: v for k, v in report.items() if " seq " in k}
    assert len(runs) == 6 and all(not errors and rel <= 1e-5 for errors, rel in runs.values()), report


DEAD_KEYS = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from triton_interp import run_program
from test_attention import HERE, _dead_block_pad as pads, _live_keys_pad as live_keys_pad, attention_model
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.frontend.graph import GraphLowering
from aotpack.verification import relative_error

report = {}
scanning = render.skips_dead_keys
for name in ("padding_additive", "padding_bool"):
    torch.manual_seed(0)
    model = attention_model(name)
    spec = ModelSpec(HERE, model, (torch.randn(5, 8, 16), pads(8)), ("x", "pad"),
                     {"x": {1: "seq"}, "pad": {1: "seq"}}, {"seq": (1, 160)})
    plan = resolve_symbols(spec)
    program = GraphLowering(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())).run()
    skipping = render.render_triton_library(program)
    render.skips_dead_keys = lambda kernel: False
    walking = render.render_triton_library(program)
    render.skips_dead_keys = scanning
    # the scan two blocks a step (four in one step by default at 160 keys): two steps, the second's last block
    # past the keys
    render.SCAN_BLOCKS = 2
    two_a_step = render.render_triton_library(program)
    render.SCAN_BLOCKS = 16
    x = torch.randn(5, 150, 16)
    # Whole key blocks the mask leaves alone, walked without reading it ("dense"), next to blocks that read it:
    # a partial block before them, a dead one before them, none after them (128 keys), and a masked key (70)
    # inside them, which breaks the run so that every block reads the mask.
    dense_pads = live_keys_pad(150, [range(10, 150), range(64, 150), range(128), [*range(70), *range(71, 150)],
                                     range(150)])
    (dense_skipped,), dense_errors = run_program(program, skipping, [x, dense_pads])
    (dense_walked,), _ = run_program(program, walking, [x, dense_pads])
    (dense_two,), two_errors = run_program(program, two_a_step, [x, dense_pads])
    with torch.no_grad():
        dense_ref = model(x, dense_pads)
    inputs = [x, pads(150)]
    with torch.no_grad():
        ref = model(*inputs)
    (skipped,), errors = run_program(program, skipping, inputs)
    (walked,), more_errors = run_program(program, walking, inputs)
    (two,), _ = run_program(program, two_a_step, inputs)
    # NaN in the keys and values of sequence 1's dead blocks (positions 64 on): the walking kernel's zero
    # weights times NaN give NaN in its live rows; the kernel that skips the blocks never reads them.
    x[1, 64:] = float("nan")
    (skipped_nan,), _ = run_program(program, skipping, [x, pads(150)])
    (walked_nan,), _ = run_program(program, walking, [x, pads(150)])
    report[name] = {"scans": "live_lo" in skipping.source and "live_lo" not in walking.source,
                    "dense": "dense_lo" in skipping.source and "dense_lo" not in walking.source,
                    "errors": errors + more_errors + dense_errors + two_errors,
                    "identical": bool(torch.equal(skipped, walked)) and bool(torch.equal(dense_skipped, dense_walked)),
                    "two_a_step": "tl.arange(0, 2 * BN)" in two_a_step.source and bool(torch.equal(two, walked))
                                  and bool(torch.equal(dense_two, dense_walked)),
                    "rel": max(relative_error(skipped.numpy(), ref.numpy()),
                               relative_error(dense_skipped.numpy(), dense_ref.numpy())),
                    "skipped": bool(torch.isfinite(skipped_nan[1, :10]).all() and walked_nan[1, :10].isnan().any())}
print(json.dumps(report))
"""


def test_attention_skips_key_blocks_a_padding_mask_removes_bit_for_bit():
    """A mask of the key alone (padding, boolean or transformers' additive finfo.min) lets the kernel walk
    only the key blocks it leaves a score in (ir/mask_structure.py skips_dead_keys): right and left padding,
    a hole inside the live keys, and a sequence with every key masked (walked whole: eager's uniform weights
    under the additive mask, zeros under the boolean one), 150 keys in blocks of 64; and the whole blocks the
    mask leaves alone walked without reading it, before, after and broken by blocks that read it. The result
    is the walking kernel's, bit for bit, and eager's, with the scan reading its blocks all in one step or in
    two steps."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", DEAD_KEYS, str(HERE), str(HERE.parent / "e2e")],
                            check=False, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(report) == {"padding_additive", "padding_bool"}
    for name, run in report.items():
        assert run["scans"] and run["dense"] and not run["errors"] and run["identical"] and run["rel"] <= 1e-5, (name, run)
        assert run["two_a_step"], (name, run)
        assert run["skipped"], (name, run)


def test_a_kernel_that_needs_more_shared_memory_than_a_target_gives_fails_the_export(tmp_path, monkeypatch):
    """sm_86 gives a block at most 99 KB of shared memory; a 128 x 256 tile 64 deep in 4 stages takes 144 KB.
    The runtime would refuse the kernel when loading the package there, so the export refuses it first."""
    import sys as _sys

    _sys.path.insert(0, str(HERE))
    from aotpack.lowering.backends.cuda import matmul_config
    from aotpack.lowering.backends.cuda.compile import TritonCompileError
    from aotpack.lowering.ir.symbolic import size_symbol
    from test_triton_buckets import _linear

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(matmul_config, "HALF_TILES", ((128, 256, 64, 8, 4),))
    library = render_triton_library(_linear(size_symbol("s"), 512, 512, "bfloat16", 1024), (86,))
    with pytest.raises(TritonCompileError, match=r"more than sm_86 GPUs give one \(101376\).*without sm_86"):
        compile_triton_library(library, (86,))
    assert compile_triton_library(library, (90,))[90].kernels  # an H100/H200 block takes 227 KB
