"""Split-K matrix products (MatmulConfig.split_k, templates/triton/matmul.py.jinja): SPLIT_K programs per output
tile each sum a slice of the depth, and the last of them to arrive adds the partial sums in slice order and
finishes the tile. What the renderer records for the runtime, and the products with their epilogues in
Triton's interpreter, slices of unequal depth and an empty one among them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from aotpack.errors import UnsupportedError
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.matmul_config import MatmulConfig
from aotpack.lowering.codegen.library import render_library
from test_triton_persistent import ROWS, product
from triton_interp import run_in_interpreter


def forced(program, config, monkeypatch):
    monkeypatch.setattr(render, "matmul_config", lambda *args, **kwargs: config)
    return render_library(render.TritonRenderer(program, 90))


def test_a_split_product_launches_its_slices_on_the_third_grid_axis(monkeypatch):
    library = forced(product(n=768, k=3072), MatmulConfig(16, 16, 256, 8, 4, 4, split_k=4), monkeypatch)
    kernel = library.kernels[0]
    assert dict(kernel.constexprs)["SPLIT_K"] == 4
    assert [name for name, _ in kernel.signature[-7:-5]] == ["split_count", "split_part"]  # before the constexprs
    assert [g.subs(ROWS, 16) for g in library.step_launches[0]] == [48, 1, 4]  # 1 x 48 tiles, 4 slices each
    # sized for the product's most rows (4096): 256 x 48 tiles x 4 slices, a 16 x 16 float32 tile each
    assert (kernel.split_programs, kernel.split_tile_bytes) == (256 * 48 * 4, 16 * 16 * 4)
    assert "tl.atomic_add(split_count + tile, 1, sem=\"acq_rel\", scope=\"gpu\")" in kernel.source
    plain = forced(product(n=768, k=3072), MatmulConfig(16, 16, 256, 8, 4, 4), monkeypatch).kernels[0]
    assert plain.split_programs == 0 and "split_count" not in plain.source and "SPLIT_K" not in dict(plain.constexprs)
    with pytest.raises(UnsupportedError, match="split-K 2 needs a tiled product"):
        forced(product(n=768, k=768), MatmulConfig(128, 128, 64, 8, 8, 3, persistent=True, split_k=2), monkeypatch)


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
from aotpack.lowering.stages import lower

class Block(torch.nn.Module):
    # a product with a fused epilogue (bias, GELU, residual) and one into a conv1d-style [K, N] weight
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(72, 40)
        self.down = torch.nn.Parameter(torch.randn(40, 72) / 40 ** 0.5)

    def forward(self, x):
        return x + torch.nn.functional.gelu(self.up(x)) @ self.down

torch.manual_seed(0)
model = Block().to(torch.float16).eval()
spec = ModelSpec(Path("block.py"), model, (torch.randn(1, 5, 72, dtype=torch.float16),), ("x",), {"x": {1: "seq"}},
                 {"seq": (1, 40)})
plan = resolve_symbols(spec)
program = lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))
report = {}
for split in (2, 3, 4):  # depth 72 in steps of 16: slices 48 + 24; 32 + 32 + 8; 32 + 32 + 8 + an empty one
    config = MatmulConfig(16, 16, 16, 8, 4, 3, split_k=split)
    render.matmul_config = lambda *args, **kwargs: config
    library = render_library(render.TritonRenderer(program, 90))
    for seq in (1, 17, 40):
        x = torch.randn(1, seq, 72, dtype=torch.float16)
        state = {}
        got, errors = run_program(program, library, [x], state=state)
        want = model.float()(x.float())
        model.half()
        report[f"{split} {seq}"] = {
            "split": sum(k.split_programs > 0 for k in library.kernels), "errors": errors,
            "rel": float((got[0].float() - want).abs().max() / want.abs().max()),
            "counts_left": int(sum(int(c.abs().sum()) for c in state["split_counts"]))}
print(json.dumps(report))
"""


def test_split_products_compute_the_model_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert len(report) == 9, report
    for point, run in report.items():
        # both products split; each tile's last program left its count at zero for the next launch
        assert run["split"] == 2 and not run["errors"] and run["counts_left"] == 0, (point, run)
        assert run["rel"] < 1e-2, f"split, seq {point}: relative error {run['rel']} against float32 eager"


def test_a_split_product_compiles_for_sm_90(tmp_path, monkeypatch):
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    from aotpack.lowering.backends.cuda.compile import compile_triton_library

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    library = forced(product(n=768, k=3072, dtype="bfloat16"), MatmulConfig(16, 16, 256, 8, 4, 4, split_k=4),
                     monkeypatch)
    compiled = compile_triton_library(library, (90,))[90].kernels[library.kernels[0].name]
    assert compiled.cubin[:4] == b"\x7fELF" and compiled.global_scratch_size == 0


def test_a_split_products_wgmma_stays_pipelined_on_sm_90(tmp_path, monkeypatch):
    """A slice's loop that might not run made ptxas serialize every wgmma of it (Triton 3.6, info C7515: the
    Llama shape's split products at 129-512 rows). The template's loop has a trip count known not zero; with a
    Triton whose ptxas did not serialize the old loop either (3.9) this passes regardless."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    from aotpack.lowering.backends.cuda.compile import compile_triton_library

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from kernel_resources import cuobjdump, resources

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    library = forced(product(n=1024, k=2816, dtype="bfloat16"), MatmulConfig(64, 128, 64, 8, 4, 4, split_k=2),
                     monkeypatch)
    compiled = compile_triton_library(library, (90,))[90].kernels[library.kernels[0].name]
    assert resources(compiled.cubin, cuobjdump())["wgmma"] == "4 in 1 groups"
