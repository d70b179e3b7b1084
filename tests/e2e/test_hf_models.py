"""Hugging Face architectures (examples/gpt2, bert, llama, vit) built from small configs with random weights.

Each example is exported once, then run through the C++ runtime at the range minimum, a small odd length,
a middle length and the maximum, and compared with eager PyTorch on the very instance that was exported.
No downloads: configs only, with the hub offline.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree

os.environ["HF_HUB_OFFLINE"] = "1"  # configs only: a test must never reach the network
pytest.importorskip("transformers")

from aotpack.exporter import load_model_file
from aotpack.verification import mismatch_report, relative_error, to_numpy
from exported import export

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TOLERANCE = 1e-4  # fp32 relative norm error against eager
VOCAB = 1000  # the small configs' vocabulary

# (batch, seq) for the text models, (batch,) for ViT; the last point of each is the declared maximum.
POINTS = {
    "gpt2": [(1, 1), (2, 7), (1, 333), (2, 2048)],
    "bert": [(1, 1), (2, 7), (2, 333), (2, 2048)],
    "llama": [(1, 1), (2, 7), (1, 333), (2, 2048)],
    "vit": [(1,), (5,), (16,)],
}
HF_EXAMPLES = tuple(sorted(POINTS))
# The same models with attn_implementation="eager": attention as matmul + additive float mask + softmax in
# float32, and grouped-query attention through repeat_kv (expand + reshape), paths that sdpa does not take.
EAGER_ATTENTION = {"bert": [(2, 7), (2, 333)], "llama": [(2, 7), (1, 333)]}
# Llama with one key/value head (multi-query attention, as Gemma-2B and Falcon-7B have): q, k and v still one
# product and the rotary rotations of q and k one step (ir/stacked_pointwise.py), k and v read as one head.
MULTI_QUERY = {"llama": [(2, 7), (1, 333)]}

EAGER_MODEL_FILE = """\
import importlib.util

_spec = importlib.util.spec_from_file_location("example_{name}", {path!r})
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)


def model():
    return base.build("small", attn_implementation="eager")


example_inputs = base.example_inputs
dynamic_axes = base.dynamic_axes
dynamic_ranges = base.dynamic_ranges
"""


MULTI_QUERY_MODEL_FILE = """\
import importlib.util

_spec = importlib.util.spec_from_file_location("example_{name}", {path!r})
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)
base.CONFIGS["small"] = {{**base.CONFIGS["small"], "num_key_value_heads": 1}}


def model():
    return base.build("small")


example_inputs = base.example_inputs
dynamic_axes = base.dynamic_axes
dynamic_ranges = base.dynamic_ranges
"""
# name suffix -> the model file that builds the example so
VARIANT_MODEL_FILES = {"-eager": EAGER_MODEL_FILE, "-mqa": MULTI_QUERY_MODEL_FILE}


def base_name(name: str) -> str:
    return next((name.removesuffix(suffix) for suffix in VARIANT_MODEL_FILES if name.endswith(suffix)), name)


def padded_batch(batch: int, seq: int, gen: torch.Generator) -> list[torch.Tensor]:
    """BERT's inputs: random tokens; sequence b keeps seq - (b + 1) * seq // (2 * batch) tokens (at least one),
    then padding, so every batch longer than one token has zeros in its attention mask."""
    input_ids = torch.randint(0, VOCAB, (batch, seq), generator=gen)
    lengths = torch.tensor([max(1, seq - (b + 1) * seq // (2 * batch)) for b in range(batch)])
    positions = torch.arange(seq)[None, :]
    attention_mask = (positions < lengths[:, None]).long()
    token_type_ids = (positions >= lengths[:, None] // 2).long() * attention_mask
    return [input_ids, attention_mask, token_type_ids]


def inputs_for(name: str, point: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    name = base_name(name)
    gen = torch.Generator().manual_seed(seed)
    if name == "vit":
        return [torch.randn(point[0], 3, 32, 32, generator=gen)]
    if name == "bert":
        return padded_batch(*point, gen)
    return [torch.randint(0, VOCAB, point, generator=gen)]


@pytest.fixture(scope="module")
def packages(tmp_path_factory, runtime_build, rt):
    """name -> (Exported, session): each example exported once for the whole module."""
    cache = {}

    def get(name: str):
        if name not in cache:
            folder = tmp_path_factory.mktemp(name)
            model_file = EXAMPLES / name / "model.py"
            base = base_name(name)
            if base != name:
                model_file = folder / "model.py"
                template = VARIANT_MODEL_FILES[name.removeprefix(base)]
                model_file.write_text(template.format(name=base, path=str(EXAMPLES / base / "model.py")))
            start = time.perf_counter()
            exported = export(model_file, folder)
            seconds = time.perf_counter() - start
            size = exported.result.path.stat().st_size
            print(f"\n{name}: exported in {seconds:.1f} s, {size / 1e6:.2f} MB")
            cache[name] = (exported, rt.Model(exported.result.path).session(num_threads=2))
        return cache[name]

    return get


def _cases() -> list:
    """Every (example, point); the full-length ones (a few seconds each at seq 2048) are marked slow."""
    cases = [(name, point) for name in HF_EXAMPLES for point in POINTS[name]]
    cases += [(f"{name}-eager", point) for name, points in EAGER_ATTENTION.items() for point in points]
    cases += [(f"{name}-mqa", point) for name, points in MULTI_QUERY.items() for point in points]
    return [pytest.param(name, point, id=f"{name}-{'x'.join(map(str, point))}",
                         marks=[pytest.mark.slow] if point[-1] >= 2048 else [])
            for name, point in cases]


@pytest.mark.parametrize("name, point", _cases())
def test_hf_model_matches_eager(name, point, packages, record_property):
    exported, session = packages(name)
    assert exported.result.manifest["verification"]["passed"]
    inputs = inputs_for(name, point)
    start = time.perf_counter()
    outputs = session.run([to_numpy(x) for x in inputs])
    seconds = time.perf_counter() - start
    with torch.no_grad():
        expected = pytree.tree_leaves(exported.model(*inputs))
    assert len(outputs) == len(expected)
    errors = []
    for info, out, ref in zip(exported.signature["outputs"], outputs, expected):
        ref_np = ref.numpy()
        err = relative_error(out, ref_np)
        assert out.shape == ref_np.shape and err <= TOLERANCE, mismatch_report(info["name"], out, ref_np)
        errors.append(err)
    record_property("rel_error", max(errors))
    record_property("runtime_s", seconds)
    print(f"{name} at {point}: rel err {max(errors):.1e}, runtime {seconds * 1e3:.1f} ms")


@pytest.mark.parametrize("name", HF_EXAMPLES)
def test_hf_model_file_gives_the_same_weights_each_load(name):
    first, second = (load_model_file(EXAMPLES / name / "model.py") for _ in range(2))
    a, b = first.model.state_dict(), second.model.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(torch.equal(x, y) for x, y in zip(first.example_inputs, second.example_inputs))


@pytest.mark.parametrize("name, causal", [("gpt2", True), ("llama", True), ("bert", False)])
def test_hf_attention_masks_are_index_math(name, causal):
    """transformers builds GPT-2's and Llama's causal masks by indexing positions, BERT's padding mask from its
    attention_mask input: lowered, no mask is stored in the arena at [batch, 1, seq, seq] (the mask reads at most
    [batch, seq] buffers), and the causal ones make causal kernels on the main diagonal with no mask left (their
    packed-sequence term is proved constant: ir/constant_over_box.py)."""
    from aotpack.api import capture_spec
    from aotpack.lowering.frontend.graph import GraphLowering

    program = GraphLowering(capture_spec(load_model_file(EXAMPLES / name / "model.py"))).run()
    steps = [s for s in program.steps if s.family == "attention"]
    assert len(steps) == 2  # the small configs' two layers
    for step in steps:
        assert step.causal == causal and step.causal_offset == 0
        mask_reads = [b for b in step.reads() if b not in (step.q.buffer, step.k.buffer, step.v.buffer)]
        assert all(len(program.buffers[b].shape) <= 2 for b in mask_reads), [program.buffers[b] for b in mask_reads]
        if name == "bert":  # the padding mask is read straight from the input, per key
            assert [program.buffers[b].kind for b in mask_reads] == ["input"]
        else:  # causal and packed-sequence terms both proved: the kernel is is_causal's, no mask left
            assert step.mask is None, step.mask
    assert not [b for b in program.buffers.values() if b.kind == "arena" and b.dtype == "bool" and len(b.shape) >= 3]
