"""The last wave split (MatmulConfig.last_wave_split, templates/triton/matmul.py.jinja): the output tiles that fill
whole waves of the GPU's SMs run whole, and each tile of the last, partial wave runs in as many slices of the
depth as keep that wave within the SMs, finished as split-K's tiles are. What the renderer records for the
runtime (grid, workspace, the unsplit twin), the products with their epilogues in Triton's interpreter with both
kinds of tile in one launch, and a compile for sm_90."""

from __future__ import annotations

import pytest
import sympy
from aotpack.errors import UnsupportedError
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.matmul_config import MatmulConfig
from aotpack.lowering.codegen.library import render_library
from test_triton_persistent import ROWS, product
from triton_interp import run_in_interpreter


def forced(program, config, monkeypatch):
    monkeypatch.setattr(render, "matmul_config", lambda *args, **kwargs: config)
    return render_library(render.TritonRenderer(program, 90))


def launch_split(tiles: int, sms: int, most: int) -> int:
    """Programs of a launch over `tiles` tiles: the whole waves', then the rest's slices (the kernel's rule)."""
    whole = tiles // sms * sms
    return whole + (tiles - whole) * max(1, min(most, sms // max(tiles - whole, 1)))


def test_the_last_waves_tiles_launch_in_slices_that_fill_one_wave(monkeypatch):
    config = MatmulConfig(128, 128, 64, 8, 8, 3, last_wave_split=4)
    library = forced(product(n=2304, k=768), config, monkeypatch)
    kernel = library.kernels[0]
    constexprs = dict(kernel.constexprs)
    assert (constexprs["WAVE_SPLIT"], constexprs["SMS"]) == (4, 132)
    assert [name for name, _ in kernel.signature if name.startswith("split_")] == ["split_count", "split_part"]
    for rows in (1, 128, 1100, 2048, 2049, 4096):
        tiles = -(-rows // 128) * 18
        grid = [int(g.subs(ROWS, rows)) for g in library.step_launches[0]]
        assert grid == [launch_split(tiles, 132, 4), 1, 1], rows
        assert grid[0] <= kernel.split_programs, rows  # the runtime checks every launch against it
    # 2048 rows: 288 tiles, two whole waves (264) and 24 tiles in 4 slices, 96 programs
    assert launch_split(288, 132, 4) == 264 + 96
    # the split tiles' partial sums (at most a wave of float32 tiles) fit the workspace the runtime gives
    assert kernel.split_programs * kernel.split_tile_bytes >= 132 * 128 * 128 * 4
    # the unsplit twin, which a runtime that does not know the split launches
    twin, twin_grid = kernel.fallback
    assert twin.split_programs == 0 and "WAVE_SPLIT" not in dict(twin.constexprs)
    assert [int(g.subs(ROWS, 2048)) for g in twin_grid] == [288, 1, 1]
    # capped at the depth's BK steps: 768 / 256 = 3 slices at most
    deep = forced(product(n=2304, k=768), MatmulConfig(128, 128, 256, 8, 8, 3, last_wave_split=8), monkeypatch)
    assert dict(deep.kernels[0].constexprs)["WAVE_SPLIT"] == 3


@pytest.mark.parametrize("changes, program", [
    ({"persistent": True}, product(n=768, k=768)),
    ({"split_k": 2}, product(n=768, k=768)),
    ({}, product(n=768, k=768, batch=sympy.Integer(2))),
])
def test_a_last_wave_split_needs_a_tiled_unbatched_product(changes, program, monkeypatch):
    config = MatmulConfig(128, 128, 64, 8, 8, 3, last_wave_split=4, **changes)
    with pytest.raises(UnsupportedError, match="split-K 2 needs|last wave split in 4 needs a tiled, unbatched"):
        forced(program, config, monkeypatch)


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
# A GPU of 4 SMs, so that small products have whole waves and a last one: 16 x 16 tiles, up's 3 columns and
# down's 5 (depth 40 and 72 in steps of 16); at 40 rows 9 and 15 tiles: 8 and 12 whole, then 1 tile in up to 4
# slices and 3 in 1 (whole again); at 17 rows 6 and 10: 4 and 8 whole, 2 in 2 slices each; at one row 3 and 5.
render.SM_COUNT[90] = 4
for most in (2, 3, 4):
    config = MatmulConfig(16, 16, 16, 8, 4, 3, last_wave_split=most)
    render.matmul_config = lambda *args, **kwargs: config
    library = render_library(render.TritonRenderer(program, 90))
    for seq in (1, 17, 40):
        x = torch.randn(1, seq, 72, dtype=torch.float16)
        state = {}
        got, errors = run_program(program, library, [x], state=state)
        want = model.float()(x.float())
        model.half()
        report[f"{most} {seq}"] = {
            "split": sum(k.split_programs > 0 for k in library.kernels), "errors": errors,
            "rel": float((got[0].float() - want).abs().max() / want.abs().max()),
            "counts_left": int(sum(int(c.abs().sum()) for c in state["split_counts"]))}
print(json.dumps(report))
"""


def test_last_wave_splits_compute_the_model_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert len(report) == 9, report
    for point, run in report.items():
        # both products split their last wave; each split tile's last program left its count at zero
        assert run["split"] == 2 and not run["errors"] and run["counts_left"] == 0, (point, run)
        assert run["rel"] < 1e-2, f"last wave split, {point}: relative error {run['rel']} against float32 eager"


def test_a_last_wave_split_compiles_for_sm_90(tmp_path, monkeypatch):
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    from aotpack.lowering.backends.cuda.compile import compile_triton_library

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    library = forced(product(n=2304, k=768, dtype="bfloat16"), MatmulConfig(128, 128, 64, 8, 8, 3, last_wave_split=4),
                     monkeypatch)
    compiled = compile_triton_library(library, (90,))[90].kernels[library.kernels[0].name]
    assert compiled.cubin[:4] == b"\x7fELF" and compiled.global_scratch_size == 0
