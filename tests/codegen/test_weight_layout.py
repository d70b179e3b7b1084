"""The CUDA layout pass that stores [K, N] weights (GPT-2's Conv1D) [N, K], as nn.Linear's are
(lowering/backends/cuda/weight_layout.py): which weights it takes, the tensors it writes, the few-row products'
L2 fetch it enables, packages for CPU and CUDA verified through export, the Triton kernels in Triton's
interpreter, and refit's hint for the new names."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch
from aotpack import export
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.weight_layout import transpose_kn_weights
from aotpack.lowering.codegen.library import render_library
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.ir.kernels import MatmulKernel
from aotpack.lowering.stages import lower
from triton_interp import run_in_interpreter

BLOCK = r"""
import torch

class Block(torch.nn.Module):
    # a Conv1D-style product ([K, N] parameter, x @ w) with a residual add, an nn.Linear ([N, K]) one, and a
    # tied embedding: gathered by the embedding and read by the last product
    def __init__(self, d=72, f=40, vocab=50):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.w_kn = torch.nn.Parameter(torch.randn(d, f) / d ** 0.5)
        self.down = torch.nn.Linear(f, d)

    def forward(self, ids):
        x = self.embed(ids)
        x = x + self.down(torch.nn.functional.gelu(x @ self.w_kn))
        return x @ self.embed.weight.t()
"""


def block():
    namespace: dict = {}
    exec(compile(BLOCK, "block.py", "exec"), namespace)  # noqa: S102 - the test's own model source
    torch.manual_seed(0)
    return namespace["Block"]().eval()


def lowered(model):
    spec = ModelSpec(Path("block.py"), model, (torch.randint(0, 50, (2, 5)),), ("ids",), {"ids": {1: "seq"}},
                     {"seq": (1, 40)})
    plan = resolve_symbols(spec)
    return lower(capture(spec, plan.symbols, plan.dynamic_shapes, decompositions()))


def test_only_the_kn_weight_read_by_products_alone_is_stored_transposed():
    model = block()
    program = lowered(model)
    laid_out = transpose_kn_weights(program)
    products = [s for s in laid_out.steps if isinstance(s, MatmulKernel)]
    sources = {laid_out.buffers[p.b.buffer].source for p in products}
    # the [K, N] parameter is stored [N, K] under a name of its own; nn.Linear's and the tied embedding stay
    assert sources == {"w_kn.transposed", "down.weight", "embed.weight"}, sources
    assert "w_kn" not in laid_out.weights and torch.equal(laid_out.weights["w_kn.transposed"], model.w_kn.detach().t())
    first = next(p for p in products if laid_out.buffers[p.b.buffer].source == "w_kn.transposed")
    assert [int(s) for s in first.b.strides[1:]] == [1, 72]  # k contiguous: as nn.Linear's weight is read
    assert [int(d) for d in laid_out.buffers[first.b.buffer].shape] == [40, 72]
    assert [n.removesuffix(".transposed") for n in laid_out.buffers] == list(program.buffers)  # each in its place
    assert transpose_kn_weights(laid_out) == laid_out  # nothing left to do


def test_the_few_row_products_fetch_the_transposed_weight_into_l2():
    program = lowered(block().to(torch.bfloat16))
    fetched = [render_library(render.TritonRenderer(p, 90, pdl=True)).source.count("_l2_prefetch(")
               for p in (program, transpose_kn_weights(program))]
    assert fetched[1] > fetched[0], fetched


@pytest.mark.parametrize("dtype", [None, "bf16"])
def test_a_package_for_cpu_and_cuda_reads_the_transposed_weights_and_verifies(tmp_path, dtype):
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    result = export(block(), (torch.randint(0, 50, (2, 5)),), tmp_path / "block.aotpack", dtype=dtype,
                    target="cpu,cuda", cuda_arch=(90,), dynamic_shapes={"ids": {1: "seq"}}, ranges={"seq": (1, 40)})
    assert result.verification["passed"], result.verification
    with zipfile.ZipFile(result.path) as z:
        names = [b["weight"] for b in json.loads(z.read("program.json"))["buffers"] if "weight" in b]
    # float32: the C++ backend's panels come first (laid out from the [K, N] parameter); bfloat16: transposed
    assert any(n.startswith("w_kn.transposed" if dtype else "w_kn.panels") for n in names), names


RUN = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1]]
from triton_interp import run_program
from test_weight_layout import block, lowered
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.weight_layout import transpose_kn_weights
from aotpack.lowering.codegen.library import render_library
model = block().to(torch.float16)
program = transpose_kn_weights(lowered(model))
library = render_library(render.TritonRenderer(program, 90))
report = {}
for seq in (1, 17, 40):
    ids = torch.randint(0, 50, (2, seq), generator=torch.Generator().manual_seed(seq))
    got, errors = run_program(program, library, [ids], state={})
    want = model.float()(ids)
    model.half()
    report[seq] = {"errors": errors, "rel": float((got[0].float() - want).abs().max() / want.abs().max())}
print(json.dumps(report))
"""


def test_the_transposed_weights_compute_the_model_in_the_triton_interpreter():
    report = run_in_interpreter(RUN)
    assert len(report) == 3, report
    for seq, run in report.items():
        assert not run["errors"] and run["rel"] < 1e-2, (seq, run)


def test_refit_without_the_model_names_the_transposed_weights_in_its_hint(tmp_path):
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    from aotpack.packages.refit import RefitError, check_weights
    from safetensors.torch import save

    model = block().to(torch.bfloat16)
    result = export(model, (torch.randint(0, 50, (2, 5)),), tmp_path / "block.aotpack", target="cuda",
                    cuda_arch=(90,), dynamic_shapes={"ids": {1: "seq"}}, ranges={"seq": (1, 40)})
    own = save({k: v.detach().contiguous() for k, v in model.state_dict().items()})
    with pytest.raises(RefitError, match=r"\*\.transposed"):
        check_weights(result.path, own, "the model's state dict")


def test_refit_with_the_model_lays_out_new_weights_as_export_did(tmp_path):
    """`aotpack refit --model` lowers the model as export does, layout passes included: the retrained [K, N]
    parameter lands in the package transposed, and the package verifies with it."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    from aotpack.api import export_model_file
    from aotpack.refit import refit_package
    from safetensors.torch import load, save_file

    model_file = tmp_path / "block.py"
    model_file.write_text(BLOCK + "\ntorch.manual_seed(0)\nmodel = Block().eval()\nexample_inputs = "
                          "(torch.randint(0, 50, (2, 5)),)\ndynamic_axes = {'ids': {1: 'seq'}}\n"
                          "dynamic_ranges = {'seq': (1, 40)}\n")
    package = tmp_path / "block.aotpack"
    export_model_file(model_file, package, target="cpu,cuda", cuda_arch="90", dtype="bf16")
    retrained = block()
    with torch.no_grad():
        retrained.w_kn.mul_(-0.5)
    weights = tmp_path / "retrained.safetensors"
    save_file({k: v.contiguous() for k, v in retrained.state_dict().items()}, str(weights))
    out = tmp_path / "refit.aotpack"
    manifest = refit_package(package, weights, out, model_file=model_file, dtype="bf16")
    assert manifest["verification"]["passed"] is True, manifest["verification"]
    with zipfile.ZipFile(out) as z:
        stored = load(z.read("weights.safetensors"))
    assert torch.equal(stored["w_kn.transposed"], retrained.w_kn.detach().to(torch.bfloat16).t())
