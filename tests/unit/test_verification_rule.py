"""The comparison rule and the verification points (aotpack.verification), without a compiler or runtime."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from aotpack.errors import ModelFileError
from aotpack.exporter.dynamic import inner_value
from aotpack.packages.program import evaluate_size
from aotpack.verification import Point, allowed_error, inputs_at, judge, range_points
from aotpack.verification.points import made_inputs
from aotpack.verification.report import verification_table


def test_float32_within_1e5_and_integers_exactly():
    ref = np.linspace(1, 2, 100, dtype=np.float32)
    assert judge("y", "float32", ref * (1 + 5e-6), ref).passed
    assert not judge("y", "float32", ref * (1 + 5e-5), ref).passed
    ids = np.arange(10)
    assert judge("i", "int64", ids, ids).passed and not judge("i", "int64", ids[::-1], ids).passed
    assert allowed_error("float32", tf32=True) == 1e-3


def test_half_precision_is_judged_against_float32_with_eager_half_as_the_noise_floor():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(4096).astype(np.float32)
    half = torch.from_numpy(ref).bfloat16().float().numpy()  # eager bf16: one rounding off float32
    as_good = torch.from_numpy(ref * (1 + 1e-3)).bfloat16().float().numpy()
    j = judge("y", "bfloat16", as_good, ref, half)
    assert j.passed and j.half_error > 1e-3 and j.allowed == pytest.approx(1.5 * j.half_error + 1e-3)
    worse = ref + 0.05 * rng.standard_normal(4096).astype(np.float32)
    bad = judge("y", "bfloat16", worse, ref, half)
    assert not bad.passed and "beyond the bfloat16 noise" in bad.explain() and "worst at (" in bad.explain()
    with pytest.raises(ValueError, match="half-precision model's own error"):
        allowed_error("float16")


def test_an_overflowing_half_model_is_named_in_the_explanation():
    ref = np.array([1.0, 7e4, 2.0], dtype=np.float32)
    half = np.array([1.0, np.inf, 2.0], dtype=np.float32)
    j = judge("y", "float16", half, ref, half)
    assert j.half_overflows and not j.passed
    assert "the model itself overflows in float16" in j.explain() and "--dtype bf16" in j.explain()
    finite = judge("y", "float16", ref, ref, half)  # a package that stays finite where eager fp16 overflows
    assert finite.half_overflows and finite.passed


def test_range_points_cover_ends_inside_and_mixed_corners():
    symbols = [{"name": "batch", "min": 1, "max": 2}, {"name": "seq", "min": 1, "max": 2048}]
    points = range_points(symbols, {"batch": 2, "seq": 16})
    assert [(p.label, dict(p.symbols)) for p in points] == [
        ("example", {"batch": 2, "seq": 16}), ("min", {"batch": 1, "seq": 1}), ("max", {"batch": 2, "seq": 2048}),
        ("inner", {"batch": 2, "seq": 879}), ("mixed", {"batch": 1, "seq": 2048}), ("mixed", {"batch": 2, "seq": 1})]
    one = range_points([{"name": "n", "min": 4, "max": 4}], {"n": 4})
    assert [p.label for p in one] == ["example"]  # duplicates dropped, the first label kept
    assert range_points([], {}) == [Point("example", {})]
    assert [inner_value(1, 64), inner_value(2, 4), inner_value(5, 6)] == [29, 3, 6]


def test_inputs_at_a_point_draw_floats_and_repeat_integer_examples():
    signature = {"inputs": [{"shape": ["batch", ["*", 2, "seq"]]}, {"shape": ["batch", "seq"]}]}
    examples = [torch.randn(2, 6), torch.tensor([[1, 2, 3], [4, 5, 6]])]
    x, ids = inputs_at(signature, examples, Point("max", {"batch": 3, "seq": 5}), seed=1)
    assert x.shape == (3, 10) and x.dtype == torch.float32 and x.std() > 0.5
    assert ids.tolist() == [[1, 2, 3, 1, 2], [4, 5, 6, 4, 5], [1, 2, 3, 1, 2]]
    assert evaluate_size(["max", ["//", "seq", 2], 1], {"seq": 9}) == 4


def test_a_models_own_verification_inputs_are_checked_against_the_signature():
    signature = {"inputs": [{"name": "x", "shape": ["n", 3]}, {"name": "offsets", "shape": ["b"]}]}
    examples = [torch.randn(4, 3, dtype=torch.bfloat16), torch.tensor([0, 2])]
    point = Point("max", {"n": 6, "b": 3})

    def good(sizes, seed):
        return torch.randn(sizes["n"], 3), torch.arange(sizes["b"]) * 2

    x, offsets = made_inputs(good, signature, examples, point, seed=0)
    assert x.dtype == torch.bfloat16 and x.shape == (6, 3) and offsets.tolist() == [0, 2, 4]
    cases = [(lambda s, k: (torch.randn(5, 3), torch.zeros(3, dtype=torch.int64)),
              r"verification_inputs\(\{'n': 6, 'b': 3\}, 0\) gave input 'x' shape \(5, 3\); .* shape \(6, 3\)"),
             (lambda s, k: (torch.randn(6, 3),), "returned 1 values; expected a tuple of 2 tensors"),
             (lambda s, k: (torch.randn(6, 3), torch.zeros(3, dtype=torch.int32)), "'offsets' of dtype torch.int32; the package"),
             (lambda s, k: s["seq"], r"raised KeyError: 'seq'")]
    for make, message in cases:
        with pytest.raises(ModelFileError, match=message):
            made_inputs(make, signature, examples, point, seed=0)


def test_inspect_table_reads_this_record_and_the_old_one():
    record = {"mode": "range", "reference": "float32", "passed": True,
              "not_verified": [{"target": "cuda", "reason": "no GPU here (x)"}],
              "points": [{"label": "min", "symbols": {"n": 1}, "device": "cpu", "passed": True,
                          "outputs": [{"name": "y", "error": 1.2e-07, "allowed": 1e-05}]},
                         {"label": "max", "symbols": {"n": 9}, "skipped": "PyTorch cannot run it"}]}
    lines = verification_table(record)
    assert lines[0] == "verified: range (2 points) on cpu against float32: passed"
    assert any(line.split() == ["min", "n=1", "cpu", "y", "1.2e-07", "1.0e-05", "-"] for line in lines)
    assert "not verified at n=9 (max): PyTorch cannot run it" in lines
    assert lines[-1] == "not verified on cuda: no GPU here (x)"
    old = verification_table({"inputs": "example shapes", "rel_error": {"output": 2e-7}, "passed": True})
    assert old == ["verified: at the example shapes on cpu: output 2.0e-07"]
    assert verification_table(None) == ["verified: no (exported with --verify=off)"]
