"""Paired products (ir/paired_products.py): a gated MLP's gate and up projections computed by one product over
their weights interleaved column by column, whose epilogue combines each pair of columns. What the lowering
makes of gated MLPs and of products that must stay apart, the C++ backend through export with verification,
and the Triton template in Triton's interpreter at several tilings, split-K and persistent programs among them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from aotpack import export
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.ir.kernels import MatmulKernel
from aotpack.lowering.stages import lower
from triton_interp import run_in_interpreter


# The gated MLPs, written as models write them: two projections with nn.Linear weights ([n, k], read
# transposed) or [k, n] parameters (x @ w); one projection with a bias cut in halves ("halves": Phi-3's
# gate_up_proj, diffusers' GEGLU); SiLU (Llama) or GELU (Gemma) gates. "shared" also reads the gate elsewhere,
# so it must stay apart.
GATED = r"""
import torch

class Gated(torch.nn.Module):
    def __init__(self, d=72, f=40, kind="linear", act="silu"):
        super().__init__()
        self.kind, self.act = kind, act
        if kind == "kn":
            self.wg = torch.nn.Parameter(torch.randn(d, f) / d ** 0.5)
            self.wu = torch.nn.Parameter(torch.randn(d, f) / d ** 0.5)
        elif kind == "halves":
            self.proj = torch.nn.Linear(d, 2 * f)
        else:
            self.gate = torch.nn.Linear(d, f, bias=False)
            self.up = torch.nn.Linear(d, f, bias=False)
        self.down = torch.nn.Linear(f, d, bias=False)

    def forward(self, x):
        if self.kind == "halves":
            u, g = self.proj(x).chunk(2, dim=-1)
        else:
            g, u = (x @ self.wg, x @ self.wu) if self.kind == "kn" else (self.gate(x), self.up(x))
        act = torch.nn.functional.silu(g) if self.act == "silu" else torch.nn.functional.gelu(g, approximate="tanh")
        y = x + self.down(act * u)
        return (y, g.sum(-1)) if self.kind == "shared" else y
"""


def gated(kind: str = "linear", act: str = "silu"):
    namespace: dict = {}
    exec(compile(GATED, "gated.py", "exec"), namespace)  # noqa: S102 - the test's own model source
    torch.manual_seed(0)
    return namespace["Gated"](kind=kind, act=act).eval()


def lowered(model):
    dtype = next(model.parameters()).dtype
    spec = ModelSpec(Path("gated.py"), model, (torch.randn(2, 5, 72, dtype=dtype),), ("x",), {"x": {1: "seq"}},
                     {"seq": (1, 40)})
    plan = resolve_symbols(spec)
    return lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))


@pytest.mark.parametrize("kind", ["linear", "kn", "halves"])
def test_a_gated_mlp_is_one_paired_product_over_interleaved_weights(kind):
    model = gated(kind)
    program = lowered(model)
    products = [s for s in program.steps if isinstance(s, MatmulKernel)]
    assert len(products) == 2, program.steps  # gate and up paired, then down
    assert len(program.steps) == 2, program.steps  # the halves' bias and the gating in the pair's epilogue
    pair = products[0]
    assert pair.paired and int(pair.n) == 80 and int(pair.out_columns) == 40 and pair.epilogue is not None
    assert [int(d) for d in program.buffers[pair.output].shape[-1:]] == [40]
    weight = program.weights[program.buffers[pair.b.buffer].source]
    if kind == "halves":
        up, gate = model.proj.weight.t().chunk(2, dim=1)
    else:
        gate, up = (model.wg, model.wu) if kind == "kn" else (model.gate.weight.t(), model.up.weight.t())
    dense = torch.as_strided(weight, (72, 80), tuple(int(s) for s in pair.b.strides[1:]), int(pair.b.offset))
    assert torch.equal(dense[:, 0::2], up.detach()) and torch.equal(dense[:, 1::2], gate.detach())
    # stored as the originals were: nn.Linear's [n, k] stays k-contiguous
    assert (int(pair.b.strides[1]) == 1) == (kind != "kn")


def test_a_gate_read_by_another_step_too_stays_its_own_product():
    program = lowered(gated("shared"))
    products = [s for s in program.steps if isinstance(s, MatmulKernel)]
    assert len(products) == 3 and not any(p.paired for p in products)


@pytest.mark.parametrize("dtype", [None, "bf16"])
@pytest.mark.parametrize("kind,act", [("linear", "silu"), ("kn", "gelu"), ("halves", "gelu")])
def test_paired_products_verify_through_export_on_the_cpu(tmp_path, kind, act, dtype):
    from torch.export import Dim

    result = export(gated(kind, act), (torch.randn(2, 5, 72),), tmp_path / "gated.aotpack", dtype=dtype,
                    dynamic_shapes={"x": {1: Dim("seq", min=1, max=40)}})
    ran = [p for p in result.verification["points"] if "device" in p]
    assert result.verification["passed"] and len(ran) >= 3, result.verification


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1]]
from triton_interp import run_program
from test_paired_products import gated, lowered
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.matmul_config import MatmulConfig
from aotpack.lowering.codegen.library import render_library

report = {}
for kind, act in (("linear", "silu"), ("kn", "gelu"), ("halves", "silu")):
    model = gated(kind, act).to(torch.float16)
    program = lowered(model)
    configs = {"16x16": MatmulConfig(16, 16, 16, 8, 4, 3), "32x64": MatmulConfig(32, 64, 32, 8, 4, 3),
               "split 3": MatmulConfig(16, 32, 16, 8, 4, 3, split_k=3),
               "persistent": MatmulConfig(32, 32, 32, 8, 4, 3, persistent=True)}
    for label, config in configs.items():
        render.matmul_config = lambda *args, config=config, **kwargs: config
        library = render_library(render.TritonRenderer(program, 90, tma=label == "persistent"))
        for seq in (1, 17, 40):
            x = torch.randn(2, seq, 72, dtype=torch.float16)
            got, errors = run_program(program, library, [x], state={})
            want = model.float()(x.float())
            model.half()
            report[f"{kind} {label} {seq}"] = {
                "paired": sum("acc_pair" in k.source for k in library.kernels), "errors": errors,
                "rel": float((got[0].float() - want).abs().max() / want.abs().max())}
print(json.dumps(report))
"""


def test_paired_products_compute_the_model_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert len(report) == 36, report
    for point, run in report.items():
        assert run["paired"] >= 1 and not run["errors"], (point, run)  # split-K: with its unsplit twin
        assert run["rel"] < 1e-2, f"{point}: relative error {run['rel']} against float32 eager"


def test_a_paired_product_compiles_for_sm_90(tmp_path, monkeypatch):
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    from aotpack.lowering.backends.cuda import render
    from aotpack.lowering.backends.cuda.compile import compile_triton_library
    from aotpack.lowering.backends.cuda.matmul_config import MatmulConfig
    from aotpack.lowering.codegen.library import render_library

    monkeypatch.setenv("AOTPACK_CACHE_DIR", str(tmp_path))
    program = lowered(gated().to(torch.bfloat16))
    for config in (MatmulConfig(16, 32, 64, 8, 4, 4), MatmulConfig(16, 32, 64, 8, 4, 4, split_k=2),
                   MatmulConfig(128, 128, 64, 8, 8, 3, persistent=True)):
        monkeypatch.setattr(render, "matmul_config", lambda *args, config=config, **kwargs: config)
        library = render_library(render.TritonRenderer(program, 90, pdl=True, tma=True))
        pair = next(k for k in library.kernels if "acc_pair" in k.source)
        assert pair.paired  # the package's kernel config says so ("paired": true, shown by aotpack inspect)
        compiled = compile_triton_library(library, (90,))[90].kernels[pair.name]
        assert compiled.cubin[:4] == b"\x7fELF", config


def test_a_hugging_face_phi3_pairs_the_halves_of_its_gate_up_projection(tmp_path):
    """Phi-3 computes its MLP's gate and up projections as one Linear and chunks it: the halves rule."""
    transformers = pytest.importorskip("transformers")
    import zipfile

    config = transformers.Phi3Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                     intermediate_size=96, vocab_size=1000, max_position_embeddings=128,
                                     use_cache=False, pad_token_id=0, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.Phi3ForCausalLM(config).eval()
    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(0))
    result = export(model, (ids,), tmp_path / "phi3.aotpack", dynamic_shapes={"input_ids": {1: "seq"}},
                    ranges={"seq": (1, 128)})
    assert result.verification["passed"], result.verification
    with zipfile.ZipFile(result.path) as z:
        weights = json.loads(z.read("program.json"))["buffers"]
    names = [b["weight"] for b in weights if "weight" in b]
    # one interleaved weight per layer, named apart from the model's parameter (refit must not take one for it)
    # (then laid out in the C++ backend's panels: *.paired.panels16)
    paired = [n for n in names if "gate_up_proj" in n]
    assert len(paired) == 2 and all(n.startswith(f"model.layers.{i}.mlp.gate_up_proj.weight.paired")
                                    for i, n in enumerate(paired)), names
