"""Matrix products reading through TMA descriptors: persistent programs (templates/triton/matmul_persistent.py.jinja)
and tiled ones (templates/triton/matmul.py.jinja with `tma`): which products may use them, that tuning offers
them on Hopper only, that they compile for sm_90 with their global scratch recorded, and that they compute the
product and its fused epilogue in Triton's interpreter (the tiled ones bit for bit as with pointer loads)."""

from __future__ import annotations

import dataclasses

import pytest
import sympy
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.matmul_config import (
    PERSISTENT_TMA_STORE_CANDIDATES,
    TILED_TMA_CANDIDATES,
    TMA_MIN_ROWS,
    MatmulConfig,
    matmul_candidates,
    matmul_config,
    persistent_shared_bytes,
)
from aotpack.lowering.codegen.library import render_library
from aotpack.lowering.ir.kernels import Buffer, GatheredOperand, MatmulKernel, Program, StridedView, Symbol
from aotpack.lowering.ir.symbolic import size_symbol
from triton_interp import run_in_interpreter

ZERO, ONE = sympy.Integer(0), sympy.Integer(1)
ROWS = size_symbol("rows")
PERSISTENT = MatmulConfig(32, 32, 32, 8, 4, 3, persistent=True)
TILED_TMA = MatmulConfig(32, 32, 32, 8, 4, 3, tma=True)


def product(n: int = 80, k: int = 72, layout: str = "linear", dtype: str = "float16", a_offset=ZERO,
            a_row=None, batch=ONE) -> Program:
    """out[rows, n] = x[rows, k] @ w, w stored [n, k] ("linear": nn.Linear's, read transposed) or [k, n]."""
    x = Buffer("x", dtype, (ROWS, sympy.Integer(k + 8)), "input", "x")
    w_shape = (n, k) if layout == "linear" else (k, n)
    w = Buffer("w", dtype, tuple(sympy.Integer(d) for d in w_shape), "weight", "w")
    out = Buffer("out", dtype, (ROWS, sympy.Integer(n)), "output", "out")
    b_strides = (ZERO, ONE, sympy.Integer(k)) if layout == "linear" else (ZERO, sympy.Integer(n), ONE)
    a = StridedView("x", a_offset, (ZERO, sympy.Integer(k + 8) if a_row is None else a_row, ONE))
    step = MatmulKernel("out", a, StridedView("w", ZERO, b_strides), batch, ROWS, sympy.Integer(n), sympy.Integer(k), dtype)
    return Program((Symbol("rows", 1, 4096),), {b.name: b for b in (x, w, out)}, (step,), ("x",), ("out",))


def tma_operands(program: Program, **changes) -> bool | None:
    kernel = dataclasses.replace(program.steps[0], **changes)
    return render.TritonRenderer(program, 90, tma=True).tma_operands(kernel)


def test_tma_reads_dense_half_operands_with_aligned_rows_only():
    assert tma_operands(product()) is True  # b stored [N, K]
    assert tma_operands(product(layout="conv1d")) is False  # b stored [K, N]
    assert tma_operands(product(a_offset=sympy.Integer(8))) is True  # 16 bytes in
    # a symbolic row stride that is a multiple of 8 elements whatever the symbol is
    assert tma_operands(product(a_row=8 * ROWS)) is True
    refused = {
        "an offset of 3 elements": (product(a_offset=sympy.Integer(3)), {}),
        "a row stride of 6 bytes": (product(a_row=sympy.Integer(3)), {}),
        "a row stride of 4 x rows elements": (product(a_row=4 * ROWS), {}),
        "a broadcast row": (product(a_row=ZERO), {}),
        "float32 operands": (product(dtype="float32"), {}),
        "a batch of matrices": (product(batch=sympy.Integer(2)), {}),
        "a stride along k": (product(), {"a": StridedView("x", ZERO, (ZERO, sympy.Integer(80), sympy.Integer(2)))}),
        "a gathered operand": (product(), {"a": GatheredOperand(None)}),
    }
    for what, (program, changes) in refused.items():
        assert tma_operands(program, **changes) is None, what


def test_tuning_offers_persistent_products_on_hopper_for_many_rows_only():
    def persistent(m, tma):
        return [c for c in matmul_candidates(m, 768, 768, "bfloat16", 90, tma=tma) if c.persistent]

    assert persistent(TMA_MIN_ROWS, True) and persistent(16384, True)
    assert not persistent(TMA_MIN_ROWS - 1, True) and not persistent(16384, False)
    assert not [c for c in matmul_candidates(16384, 768, 768, "float32", 90, tma=True) if c.persistent]
    # the renderer offers them only when every target is sm_90+ and the operands are readable by TMA
    program = product(n=768, k=768)
    kernel = program.steps[0]
    for tma, expected in ((True, True), (False, False)):
        renderer = render.TritonRenderer(program, 90, tma=tma)
        renderer._cap = (ROWS, 4096)
        assert any(c.persistent for c in renderer.candidates(kernel)) is expected
    assert render.render_triton_library(program, (80, 90)).kernels[0].persistent is False


def test_the_hopper_table_chooses_persistent_programs_from_2048_rows():
    """Cross-compiled sm_90 packages (no tuning) get them where scripts/gpu_matmul_bench.py measured them faster:
    GPT-2's qkv product over 1..4096 rows, per bucket of its rows."""
    program = product(n=2304, k=768)
    library = render.render_triton_library(program, (90,))
    variants = library.variants_of(0)
    kernels = {k.name: k for k in library.kernels}
    by_bucket = {v.upto: kernels[v.kernel] for v in variants.variants}
    by_bucket[4096] = kernels[library.step_kernels[0]]  # above every bucket: the step's own kernel
    assert {upto: k.persistent for upto, k in by_bucket.items()} == {16: False, 128: False, 512: False, 2048: True,
                                                                      4096: True}, by_bucket
    assert dict(by_bucket[2048].constexprs)["BN"] == 128 and dict(by_bucket[4096].constexprs)["BN"] == 256
    # a vocabulary product from 129 rows (the tuned exports' logits)
    logits = render.render_triton_library(product(n=50257, k=768), (90,))
    names = {k.name: k.persistent for k in logits.kernels}
    assert [names[v.kernel] for v in logits.variants_of(0).variants] == [False, False]
    assert names[logits.step_kernels[0]] is True
    # not when a target lacks TMA, nor for products below the measured sizes
    assert not any(k.persistent for k in render.render_triton_library(program, (80, 90)).kernels)
    assert not any(k.persistent for k in render.render_triton_library(product(n=512, k=768), (90,)).kernels)


def test_the_table_keeps_persistent_programs_whose_shared_memory_would_not_fit():
    """With an epilogue the store stages the float32 tile apart from the pipeline: 128 x 256 x 64 at 3 stages
    then needs about 272 KB, over sm_90's 227 (GPT-2's attention output product failed to compile so)."""
    assert persistent_shared_bytes(128, 256, 64, 8, 3, 4) > 232448 >= persistent_shared_bytes(128, 256, 64, 8, 3, 2)
    assert matmul_config(4096, 768, 768, "bfloat16", 90, tma=True, store_bytes=2).persistent
    assert not matmul_config(4096, 768, 768, "bfloat16", 90, tma=True, store_bytes=4).persistent
    assert matmul_config(2048, 768, 768, "bfloat16", 90, tma=True, store_bytes=4).persistent  # 128 x 128 fits
    candidates = matmul_candidates(4096, 768, 768, "bfloat16", 90, tma=True, store_bytes=4)
    assert candidates[0] == matmul_config(4096, 768, 768, "bfloat16", 90, tma=True, store_bytes=4)


def forced(program: Program, config: MatmulConfig, monkeypatch):
    monkeypatch.setattr(render, "matmul_config", lambda *args, **kwargs: config)
    return render_library(render.TritonRenderer(program, 90, pdl=True, tma=True))


def test_a_persistent_product_launches_a_program_per_sm_at_most(monkeypatch):
    library = forced(product(), PERSISTENT, monkeypatch)
    kernel = library.kernels[0]
    assert kernel.persistent and "make_tensor_descriptor" in kernel.source
    grid = library.step_launches[0]
    assert [g.subs(ROWS, 10) for g in grid] == [3, 1, 1]  # 1 x 3 tiles
    assert [g.subs(ROWS, 4096) for g in grid] == [132, 1, 1]  # 128 x 3 tiles on the H200's 132 SMs
    with pytest.raises(Exception, match="persistent TMA"):
        forced(product(dtype="float32"), PERSISTENT, monkeypatch)


@pytest.mark.parametrize("config", [MatmulConfig(128, 128, 64, 8, 8, 3, persistent=True),
                                    MatmulConfig(128, 128, 64, 8, 8, 3, persistent=True, tma_store=True),
                                    MatmulConfig(64, 128, 64, 8, 4, 4, tma=True)],
                         ids=["persistent", "persistent_tma_store", "tiled"])
def test_a_tma_product_compiles_for_sm_90_with_its_scratch_recorded(config, tmp_path, monkeypatch):
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    from aotpack.lowering.backends.cuda.compile import compile_triton_library

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    library = forced(product(n=768, k=768), config, monkeypatch)
    kernel = library.kernels[0]
    descriptors = 3 if config.tma_store else 2  # a, b and, storing through TMA, out
    assert kernel.persistent == config.persistent and kernel.source.count("tl.make_tensor_descriptor(") == descriptors
    assert "a_ptrs" not in kernel.source and "b_ptrs" not in kernel.source
    assert ("out_ptrs" in kernel.source) is not config.tma_store and ("out_desc.store(" in kernel.source) is config.tma_store
    # the descriptors are written after the wait for the previous kernel, whose programs may still use the
    # session's global scratch until then (programmatic dependent launch)
    assert kernel.source.index("gdc_wait()") < kernel.source.index("tl.make_tensor_descriptor(")
    compiled = compile_triton_library(library, (90,))[90].kernels[kernel.name]
    assert compiled.cubin[:4] == b"\x7fELF"
    # a descriptor of 128 bytes each per program, which the runtime provides (cuda_workspace.cpp)
    assert compiled.global_scratch_size == 128 * descriptors and compiled.global_scratch_align == 128
    assert compiled.profile_scratch_size == 0
    if config.persistent:  # the table's shared memory estimate bounds the compiled kernel's (a 2-byte output)
        assert compiled.shared <= persistent_shared_bytes(128, 128, 64, 8, 3, 2)
    else:  # one program a tile, as without TMA
        assert [g.subs(ROWS, 2048) for g in library.step_launches[0]] == [32 * 6, 1, 1]


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1]]
from triton_interp import run_program
from pathlib import Path
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.matmul_config import MatmulConfig
from aotpack.lowering.codegen.library import render_library
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.ir.kernels import MatmulKernel
from aotpack.lowering.stages import lower

class Block(torch.nn.Module):
    # a product with a fused epilogue (bias, GELU, residual) and one into a conv1d-style [K, N] weight
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(40, 72)
        self.down = torch.nn.Parameter(torch.randn(72, 40) / 72 ** 0.5)

    def forward(self, x):
        return x + torch.nn.functional.gelu(self.up(x)) @ self.down

torch.manual_seed(0)
model = Block().to(torch.float16).eval()
x = torch.randn(1, 50, 40, dtype=torch.float16)
spec = ModelSpec(Path("block.py"), model, (x,), ("x",), {"x": {1: "seq"}}, {"seq": (1, 300)})
plan = resolve_symbols(spec)
program = lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))
products = [s for s in program.steps if isinstance(s, MatmulKernel)]

def library(**kind):  # every product (each bucket's kernel) at one configuration
    config = MatmulConfig(16, 32, 32, 8, 4, 3, **kind)
    render.matmul_config = lambda *args, **kwargs: config
    return render_library(render.TritonRenderer(program, 90, tma=True))

libraries = {"persistent": library(persistent=True), "tiled_tma": library(tma=True), "pointers": library(),
             "persistent_tma_store": library(persistent=True, tma_store=True)}
report = {"products": len(products), "kernels": {}, "errors": {}, "identical": {}}
report["kernels"]["persistent"] = sum(k.persistent for k in libraries["persistent"].kernels)
report["kernels"]["persistent_tma_store"] = sum("out_desc.store(" in k.source
                                                for k in libraries["persistent_tma_store"].kernels)
report["kernels"]["tiled_tma"] = sum(k.config is not None and k.config.tma for k in libraries["tiled_tma"].kernels)
report["kernels"]["pointers"] = len(libraries["pointers"].kernels)
for seq in (1, 17, 50, 300):
    x = torch.randn(1, seq, 40, dtype=torch.float16)
    got = {name: run_program(program, lib, [x])[0][0] for name, lib in libraries.items()}
    want = model.float()(x.float())
    model.half()
    for name in ("persistent", "tiled_tma"):
        report["errors"][f"{name} {seq}"] = float((got[name].float() - want).abs().max() / want.abs().max())
    report["identical"][seq] = bool(torch.equal(got["tiled_tma"], got["pointers"]))
    report["identical"][f"store {seq}"] = bool(torch.equal(got["persistent_tma_store"], got["persistent"]))
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def interpreted():
    """RUN's report: the block's products as persistent, tiled-TMA and tiled pointer-load programs."""
    return run_in_interpreter(RUN)


def test_persistent_products_compute_the_model_in_the_triton_interpreter(interpreted):
    assert interpreted["kernels"]["persistent"] == interpreted["products"] == 2, interpreted
    for case, err in interpreted["errors"].items():
        if case.startswith("persistent"):
            assert err < 1e-2, f"{case} rows: relative error {err} against float32 eager"


def test_persistent_products_storing_through_tma_store_what_pointer_stores_store(interpreted):
    """The same block with its persistent products' tiles stored through a descriptor (the fused epilogue's
    bias, GELU and residual before it): the pointer stores' outputs bit for bit at 1 to 300 rows, edges
    included (out's rows past M and columns past N are not written)."""
    assert interpreted["kernels"]["persistent_tma_store"] == interpreted["products"], interpreted
    stores = {seq: same for seq, same in interpreted["identical"].items() if str(seq).startswith("store")}
    assert len(stores) == 4 and all(stores.values()), interpreted


def test_tuning_offers_tma_stores_where_a_descriptor_can_write_the_output(monkeypatch):
    def stores(program):
        renderer = render.TritonRenderer(program, 90, tma=True)
        renderer._cap = (ROWS, 4096)
        return [c for c in renderer.candidates(program.steps[0]) if c.tma_store]

    offered = stores(product(n=768, k=768))
    assert len(offered) == len(PERSISTENT_TMA_STORE_CANDIDATES) and all(c.persistent for c in offered)
    # GPT-2's vocabulary (50257 columns: rows of 100514 bytes, not a multiple of 16) and a batch of matrices
    assert not stores(product(n=50257, k=768)) and not stores(product(n=768, k=768, batch=sympy.Integer(2)))
    assert not [c for c in matmul_candidates(2048, 768, 768, "bfloat16", 90, tma=True) if c.tma_store]
    assert not render.render_triton_library(product(n=768, k=768), (90,)).kernels[0].config.tma_store  # not the table's
    with pytest.raises(Exception, match="storing through TMA"):
        forced(product(n=50257, k=768), MatmulConfig(128, 128, 64, 8, 8, 3, persistent=True, tma_store=True),
               monkeypatch)
    with pytest.raises(Exception, match="storing through TMA"):
        forced(product(n=768, k=768), MatmulConfig(128, 128, 64, 8, 8, 3, tma_store=True), monkeypatch)


def test_tuning_offers_tiled_tma_products_on_hopper_for_many_rows_only(monkeypatch):
    def tiled(m, tma, dtype="bfloat16"):
        return [c for c in matmul_candidates(m, 768, 768, dtype, 90, tma=tma) if c.tma]

    assert len(tiled(2048, True)) == len(TILED_TMA_CANDIDATES) and all(not c.persistent for c in tiled(2048, True))
    assert not tiled(TMA_MIN_ROWS - 1, True) and not tiled(2048, False) and not tiled(2048, True, "float32")
    assert not any(c.tma for c in matmul_candidates(2048, 768, 768, "bfloat16", 90, tma=False))
    assert not render.render_triton_library(product(n=768, k=768), (90,)).kernels[0].config.tma  # never the table's
    with pytest.raises(Exception, match="tiled product with TMA loads"):
        forced(product(dtype="float32"), TILED_TMA, monkeypatch)


def test_tiled_tma_products_compute_what_pointer_loads_compute_in_the_triton_interpreter(interpreted):
    """The same block with every product tiled with TMA loads: the same outputs as with pointer loads, bit for
    bit, at 1 to 300 rows."""
    assert interpreted["kernels"]["tiled_tma"] == interpreted["kernels"]["pointers"] >= 2, interpreted
    assert all(interpreted["identical"].values()), interpreted
    for case, err in interpreted["errors"].items():
        if case.startswith("tiled_tma"):
            assert err < 1e-2, f"{case} rows: relative error {err} against float32 eager"
