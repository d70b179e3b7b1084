"""The examples on CUDA: exported for cpu,cuda, verified at export on this GPU, run over their ranges."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree
from aotpack.build import build_package
from aotpack.exporter import capture, load_model_file, parse_dynamic_specs, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.lowering.targets import CpuTarget, CudaTarget, Targets
from aotpack.verification import to_numpy, verify_package
from exported import make_inputs, range_points
from gpu_helpers import compare

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# torch 2.11 (the GPU image's) specialises the CNN's pooled spatial sizes to even values: keep them fixed there.
DYNAMIC = {"cnn": ("height=32..32", "width=32..32")}


# The Hugging Face examples at their small (test) sizes; scripts/gpu_acceptance.py runs the real ones.
@pytest.mark.parametrize("example", ["mlp", "cnn", "transformer_block", "gpt2", "bert", "llama", "vit"])
def test_example_on_cuda(example, tmp_path, rt, cuda_arch):
    spec = load_model_file(EXAMPLES / example / "model.py")
    plan = resolve_symbols(spec, parse_dynamic_specs(DYNAMIC.get(example, ())))
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    targets = Targets(CpuTarget("x86-64-v3"), CudaTarget((cuda_arch,)))
    result = build_package(captured, tmp_path / f"{example}.aotpack", verify=verify_package, targets=targets)
    verification = result.manifest["verification"]
    assert verification["passed"] and verification["cuda"]["passed"], verification

    class Exported:  # what exported.make_inputs reads
        pass

    ex = Exported()
    ex.signature, ex.spec = result.manifest["signature"], spec
    session = rt.Model(result.path).session(device="cuda")
    model = spec.model.eval()
    for seed, point in enumerate(range_points(result.manifest["signature"]["symbols"])):
        inputs = make_inputs(ex, point, seed)
        with torch.no_grad():
            expected = model(*inputs)
        expected = pytree.tree_leaves(expected)  # tuples, Hugging Face ModelOutputs: flattened as export does
        compare(session.run([to_numpy(x) for x in inputs]), expected, result.manifest["signature"], f"{example} {point}")
