"""exporter.dynamic: --dynamic parsing, merging with model.py's defaults, and validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from aotpack.errors import DynamicShapeError
from aotpack.exporter import (
    SymbolSpec,
    capture_examples,
    load_model_file,
    parse_dynamic_specs,
    resolve_symbols,
)

MODELS = Path(__file__).parent / "models"


def resolve(name: str, *specs: str):
    return resolve_symbols(load_model_file(MODELS / name), parse_dynamic_specs(specs))


def test_parse_specs():
    assert parse_dynamic_specs(["seq=1..2048", " batch = 2 .. 8 "]) == {"seq": (1, 2048), "batch": (2, 8)}
    assert parse_dynamic_specs([]) == {}


@pytest.mark.parametrize("spec", ["seq", "seq=1-5", "seq=..5", "seq=a..b", "=1..2", "seq=1..2..3"])
def test_parse_bad_syntax_shows_expected_form(spec):
    with pytest.raises(DynamicShapeError, match=r"expected NAME=MIN\.\.MAX"):
        parse_dynamic_specs([spec])


def test_parse_bad_name_and_duplicate():
    with pytest.raises(DynamicShapeError, match=r"'1seq' is not a valid symbol name"):
        parse_dynamic_specs(["1seq=1..4"])
    with pytest.raises(DynamicShapeError, match=r"gives seq twice"):
        parse_dynamic_specs(["seq=1..4", "seq=1..8"])


def test_file_defaults():
    plan = resolve("dyn_two.py")
    assert plan.symbols == (SymbolSpec("batch", 1, 8), SymbolSpec("seq", 1, 128))
    dims = plan.dynamic_shapes
    assert set(dims) == {"x", "mask"}
    # One Dim per symbol, shared by every axis bound to it.
    assert dims["x"][1] is dims["mask"][1]
    assert dims["x"][0] is dims["mask"][0]
    assert dims["x"][1].__name__ == "seq" and dims["x"][1].min == 1 and dims["x"][1].max == 128


def test_cli_overrides_file_default():
    plan = resolve("dyn_two.py", "seq=2..16")
    assert SymbolSpec("seq", 2, 16) in plan.symbols
    assert SymbolSpec("batch", 1, 8) in plan.symbols


def test_no_ranges_means_static():
    plan = resolve("static_mlp.py")
    assert plan.symbols == () and plan.dynamic_shapes is None


def test_static_input_gets_none():
    plan = resolve("dyn_seq.py")
    assert plan.dynamic_shapes["x"][1].__name__ == "seq"


def test_unbound_symbol_lists_bound_ones():
    with pytest.raises(
        DynamicShapeError,
        match=r"symbol sequence has a range but is bound to no input axis; "
        r"the bound symbols are: seq",
    ):
        resolve("dyn_seq.py", "sequence=1..4")


def test_bound_symbol_without_range():
    with pytest.raises(
        DynamicShapeError,
        match=r"symbol batch \(input 'input' axis 0\) has no range; "
        r"give one with --dynamic batch=MIN\.\.MAX",
    ):
        resolve("axes_no_range.py")


def test_min_greater_than_max():
    with pytest.raises(DynamicShapeError, match=r"symbol seq: min 9 is greater than max 4"):
        resolve("dyn_seq.py", "seq=9..4")


def test_negative_min():
    with pytest.raises(DynamicShapeError, match=r"symbol seq: min -1 is negative"):
        resolve("dyn_seq.py", "seq=-1..4")


def test_example_outside_range_names_everything():
    with pytest.raises(DynamicShapeError) as info:
        resolve("dyn_seq.py", "seq=8..64")
    assert str(info.value) == (
        "example input 'x' axis 1 (seq) has size 5, outside seq's range 8..64; change the example or the range"
    )


def test_shared_symbol_with_different_example_sizes():
    with pytest.raises(
        DynamicShapeError,
        match=r"symbol seq is bound to input 'x' axis 1 \(example size 5\) "
        r"and input 'y' axis 1 \(example size 6\)",
    ):
        resolve("shared_mismatch.py")


def test_range_too_small_to_be_dynamic():
    with pytest.raises(DynamicShapeError, match=r"range 0\.\.1 is too small"):
        resolve("dyn_seq.py", "seq=0..1")


def test_fixed_range_is_static_with_note(tmp_path):
    plan = resolve("dyn_seq.py", "seq=5..5")
    assert plan.symbols == (SymbolSpec("seq", 5, 5),)
    assert plan.dynamic_shapes is None
    assert "captured as the fixed size 5" in plan.notes[0]


def test_capture_examples_enlarge_size_one_only():
    spec = load_model_file(MODELS / "size_one.py")
    plan = resolve_symbols(spec)
    inputs, notes = capture_examples(spec, plan.symbols)
    assert inputs[0].shape == (3, 2)
    assert torch.equal(inputs[0][:, 0], spec.example_inputs[0][:, 0])
    assert spec.example_inputs[0].shape == (3, 1)  # the original is untouched
    assert "size 1" in notes[0] and "1..32 is kept" in notes[0]

    spec = load_model_file(MODELS / "dyn_seq.py")
    inputs, notes = capture_examples(spec, resolve_symbols(spec).symbols)
    assert inputs[0] is spec.example_inputs[0] and notes == ()
