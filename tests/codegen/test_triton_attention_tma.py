"""Attention with its keys and values loaded by the tensor memory accelerator (templates/triton/attention.py.jinja
with `tma`): which layouts may use it, that tuning offers it on Hopper only, that it compiles for sm_90 with
its two descriptors' global scratch recorded, and that it computes what the kernel with pointer loads computes,
bit for bit, in Triton's interpreter."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import sympy
import torch
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.exporter.dtype import with_dtype
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.attention_config import AttentionConfig
from aotpack.lowering.codegen.library import render_library
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.ir.kernels import AttentionKernel, StridedView
from aotpack.lowering.stages import lower
from triton_interp import run_in_interpreter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))  # the attention cases' models
from test_attention import HERE, _pad, attention_model

TMA = AttentionConfig(64, 64, 4, 3, tma=True)


def half_program(name: str, dtype=torch.float16):
    """tests/e2e/test_attention.py's case `name` lowered in half precision, seq 1..160."""
    torch.manual_seed(0)
    spec = with_dtype(ModelSpec(HERE, attention_model(name), (torch.randn(2, 8, 16), _pad(2, 8)), ("x", "pad"),
                                {"x": {1: "seq"}, "pad": {1: "seq"}}, {"seq": (1, 160)}), dtype)
    plan = resolve_symbols(spec)
    return lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))


def attention_step(program) -> AttentionKernel:
    return next(s for s in program.steps if isinstance(s, AttentionKernel))


def test_tma_loads_the_keys_and_values_of_aligned_half_layouts_only():
    program = half_program("padding_bool")
    kernel = attention_step(program)
    renderer = render.TritonRenderer(program, 90, tma=True)
    # Hugging Face's layout: k and v are views into the fused qkv product's rows, 16-byte aligned
    assert renderer.attention_tma(kernel) is True
    assert render.TritonRenderer(half_program("padding_bool", torch.bfloat16), 90, tma=True).attention_tma(
        attention_step(half_program("padding_bool", torch.bfloat16))) is True

    def with_k(**changes) -> AttentionKernel:
        return dataclasses.replace(kernel, k=dataclasses.replace(kernel.k, **changes))

    strides = kernel.k.strides
    refused = {
        "an offset of 4 elements (8 bytes)": with_k(offset=kernel.k.offset + 4),
        "a row stride of 12 elements": with_k(strides=(strides[0], strides[1], sympy.Integer(12), strides[3])),
        "a head stride of 4 elements": with_k(strides=(strides[0], sympy.Integer(4), strides[2], strides[3])),
        "a broadcast row": with_k(strides=(strides[0], strides[1], sympy.Integer(0), strides[3])),
        "a stride along the head dim": with_k(strides=(*strides[:3], sympy.Integer(2))),
        "a head dim over TMA's box": dataclasses.replace(kernel, head_dim=sympy.Integer(320)),
    }
    for what, changed in refused.items():
        assert renderer.attention_tma(changed) is False, what
    float32 = half_program("padding_bool", torch.float32)
    assert render.TritonRenderer(float32, 90, tma=True).attention_tma(attention_step(float32)) is False
    assert isinstance(kernel.k, StridedView)


def test_neither_the_table_nor_tuning_offers_tma_attention():
    """Measured slower than pointer loads on the H200 at every shape timed (session 30): the benchmark's alone."""
    program = half_program("gqa_causal_dim80")
    kernel = attention_step(program)
    for tma in (True, False):
        renderer = render.TritonRenderer(program, 90, tma=tma)
        candidates = renderer.candidates(kernel)
        assert candidates[0] == render.attention_config(160, 160, 80, False)  # the table's first
        assert len(candidates) > 1 and not any(c.tma for c in candidates)
    # the table never chooses it, and forcing it where TMA cannot run is refused
    assert not any(k.config.tma for k in render.render_triton_library(program, (90,)).kernels
                   if isinstance(k.config, AttentionConfig))
    with pytest.raises(Exception, match="attention with TMA loads needs sm_90"):
        render.TritonRenderer(program, 80, tma=False).render_with(kernel, TMA)


def test_tma_attention_compiles_for_sm_90_with_two_descriptors_of_scratch(tmp_path, monkeypatch):
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    from aotpack.lowering.backends.cuda.compile import compile_triton_library

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    program = half_program("padding_bool", torch.bfloat16)
    monkeypatch.setattr(render, "attention_config", lambda *args, **kwargs: TMA)
    library = render_library(render.TritonRenderer(program, 90, pdl=True, tma=True))
    kernel = next(k for k in library.kernels if k.family == "attention")
    assert kernel.config.tma and kernel.source.count("tl.make_tensor_descriptor(") == 2
    # written after the kernel's wait for its predecessor, whose programs (programmatic dependent launch) may
    # still use the session's global scratch until then
    assert kernel.source.index("gdc_wait()") < kernel.source.index("tl.make_tensor_descriptor(")
    compiled = compile_triton_library(library, (90,))[90].kernels[kernel.name]
    assert compiled.cubin[:4] == b"\x7fELF"
    # two descriptors of 128 bytes each per program, which the runtime provides (cuda_workspace.cpp)
    assert compiled.global_scratch_size == 256 and compiled.global_scratch_align == 128


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/../e2e"]
from test_triton_attention_tma import half_program, TMA
from triton_interp import run_program
from test_attention import _pad, _dead_block_pad, attention_model
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.attention_config import AttentionConfig
from aotpack.lowering.codegen.library import render_library
from aotpack.verification import relative_error

def library(program, tma):
    render.attention_config = lambda *args, **kwargs: AttentionConfig(TMA.bm, TMA.bn, TMA.num_warps, TMA.num_stages, tma)
    return render_library(render.TritonRenderer(program, 90, tma=True))

report = {}
for name in ("padding_bool", "padding_additive", "gqa_causal_dim80", "causal_and_mask", "all_masked_rows",
             "head_dim_24"):
    program = half_program(name)
    with_tma, pointers = library(program, True), library(program, False)
    assert "make_tensor_descriptor" in with_tma.source and "make_tensor_descriptor" not in pointers.source
    torch.manual_seed(0)  # the weights half_program exported, in float32
    model = attention_model(name)
    for seq in (1, 70, 150):
        pad = _dead_block_pad(seq)[:2] if seq == 150 else _pad(2, seq)
        inputs = [torch.randn(2, seq, 16).half(), pad.half()]
        (got,), errors = run_program(program, with_tma, inputs)
        (want,), _ = run_program(program, pointers, inputs)
        with torch.no_grad():
            ref = model.float()(inputs[0].float(), inputs[1].float())
        report[f"{name} seq {seq}"] = (errors, bool(torch.equal(got, want)),
                                       relative_error(got.float().numpy(), ref.numpy()))
print(json.dumps(report))
"""


def test_tma_attention_computes_what_pointer_loads_compute_in_the_triton_interpreter():
    """Padding (boolean, additive, whole dead key blocks at 150 keys), grouped-query heads at head dim 80
    (columns past it read as zero), causal with and without a mask, rows with every key masked, head dim 24:
    at 1, 70 and 150 keys (partial and whole blocks of 64), the TMA kernel's output equals the pointer-load
    kernel's bit for bit, and both are near float32 eager."""
    report = run_in_interpreter(RUN)
    assert len(report) == 18, report
    for case, (errors, equal, rel) in report.items():
        assert not errors and equal and rel < 2e-2, (case, errors, equal, rel)
