"""exporter.model_file: loading model.py, and a one-line ModelFileError for each way it can be wrong."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from aotpack.errors import AotpackError, CaptureError, DynamicShapeError, ModelFileError, UnsupportedError
from aotpack.exporter import load_model_file

MODELS = Path(__file__).parent / "models"


def line_of(name: str, marker: str) -> int:
    """The line number of the fixture's line holding `marker`, so tests assert exact lines without
    hard-coding numbers that drift when a fixture is edited."""
    lines = (MODELS / name).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line)


def load_error(name: str) -> str:
    with pytest.raises(ModelFileError) as info:
        load_model_file(MODELS / name)
    return str(info.value)


def test_error_hierarchy():
    for cls in (ModelFileError, DynamicShapeError, CaptureError, UnsupportedError):
        assert issubclass(cls, AotpackError)
    assert issubclass(AotpackError, Exception)


def test_loads_module_factory_and_single_tensor():
    spec = load_model_file(MODELS / "static_mlp.py")
    assert isinstance(spec.model, torch.nn.Module)
    assert spec.path == (MODELS / "static_mlp.py").resolve()
    assert len(spec.example_inputs) == 1 and spec.example_inputs[0].shape == (2, 8)
    assert spec.input_names == ("x",)
    assert spec.dynamic_axes == {} and spec.dynamic_ranges == {}


def test_loads_class_as_factory_and_normalises_negative_axes():
    spec = load_model_file(MODELS / "dyn_two.py")
    assert spec.input_names == ("x", "mask")
    assert spec.dynamic_axes == {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}}
    assert spec.dynamic_ranges == {"batch": (1, 8), "seq": (1, 128)}


def test_sibling_imports_work_and_sys_path_is_restored():
    import sys

    before = list(sys.path)
    spec = load_model_file(MODELS / "sibling.py")
    assert torch.equal(spec.model(torch.ones(2)), torch.full((2,), 2.0))
    assert sys.path == before


def test_each_load_is_a_fresh_module():
    a = load_model_file(MODELS / "dyn_seq.py")
    b = load_model_file(MODELS / "dyn_seq.py")
    assert type(a.model).__module__ != type(b.model).__module__


def test_missing_file():
    with pytest.raises(ModelFileError, match=r"model file .*nowhere\.py does not exist"):
        load_model_file(MODELS / "nowhere.py")


def test_import_error_names_user_line_and_exception():
    message = load_error("import_error.py")
    line = line_of("import_error.py", "# IMPORT")
    assert f"import_error.py:{line}" in message
    assert "NameError: name 'undefined_width' is not defined" in message
    assert "importing" in message
    assert "\n" not in message


def test_syntax_error_names_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import torch\n\ndef model(:\n    pass\n")
    with pytest.raises(ModelFileError, match=r"broken\.py:3: SyntaxError"):
        load_model_file(path)


def test_factory_error_names_user_line():
    message = load_error("factory_raises.py")
    line = line_of("factory_raises.py", "# FACTORY")
    assert f"factory_raises.py:{line}" in message
    assert "RuntimeError: weights not found" in message
    assert "model()" in message


def test_missing_model_says_what_to_define():
    message = load_error("no_model.py")
    assert "does not define `model`" in message
    assert "nn.Module" in message


def test_missing_example_inputs_says_what_to_define():
    message = load_error("no_examples.py")
    assert "does not define `example_inputs`" in message
    assert "tuple" in message


def test_non_tensor_example_names_position():
    message = load_error("bad_example.py")
    assert "example_inputs[1] is an int, not a tensor" in message


def test_model_of_wrong_type(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import torch\nmodel = 3\nexample_inputs = (torch.ones(1),)\n")
    with pytest.raises(ModelFileError, match=r"`model` is an int"):
        load_model_file(path)


def test_factory_returning_non_module(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import torch\ndef model():\n    return [1]\nexample_inputs = (torch.ones(1),)\n")
    with pytest.raises(ModelFileError, match=r"model\(\) returned a list, not a torch\.nn\.Module"):
        load_model_file(path)


def test_too_many_examples(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\nmodel = torch.nn.ReLU()\nexample_inputs = (torch.ones(1), torch.ones(1))\n"
    )
    with pytest.raises(ModelFileError, match=r"example_inputs has 2 tensors but ReLU\.forward\(\) takes 1"):
        load_model_file(path)


def test_dynamic_axes_unknown_argument_lists_real_ones():
    message = load_error("bad_axis_name.py")
    assert "'inputs_ids'" in message
    assert "the inputs are: input_ids, attention_mask" in message


def test_dynamic_axes_axis_out_of_range():
    message = load_error("bad_axis_rank.py")
    assert re.search(r"binds axis 2, but example input 'input' has rank 2", message)


def test_dynamic_ranges_wrong_type(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\nmodel = torch.nn.ReLU()\nexample_inputs = (torch.ones(2, 3),)\n"
        "dynamic_axes = {'input': {1: 'seq'}}\ndynamic_ranges = {'seq': 64}\n"
    )
    with pytest.raises(ModelFileError, match=r"dynamic_ranges\['seq'\] is 64; it must be \(min, max\)"):
        load_model_file(path)


def test_keyword_only_forward_is_refused():
    with pytest.raises(CaptureError, match=r"keyword-only argument `scale`"):
        load_model_file(MODELS / "kwonly.py")
