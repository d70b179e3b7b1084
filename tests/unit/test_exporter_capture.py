"""exporter.capture: torch.export over the declared ranges, and errors that name the user's line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from aotpack.errors import CaptureError
from aotpack.exporter import (
    CapturedProgram,
    ModelSpec,
    SymbolSpec,
    capture,
    export_model,
    load_model_file,
    resolve_symbols,
)

MODELS = Path(__file__).parent / "models"


def line_of(name: str, marker: str) -> int:
    lines = (MODELS / name).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line)


def export(name: str, *dynamic: str) -> CapturedProgram:
    return export_model(MODELS / name, dynamic)


def capture_error(name: str, *dynamic: str, chained: bool = True) -> str:
    with pytest.raises(CaptureError) as info:
        export(name, *dynamic)
    if chained:  # a translated torch.export failure keeps torch's error as its cause, for --debug
        assert info.value.__cause__ is not None
    return str(info.value)


def symbol_ranges(captured: CapturedProgram) -> dict[str, tuple[int, int]]:
    return {
        captured.symbol_of[str(sym)]: (int(r.lower), int(r.upper))
        for sym, r in captured.program.range_constraints.items()
    }


def run(captured: CapturedProgram, *inputs: torch.Tensor):
    return captured.program.module()(*inputs)


# --- positive -------------------------------------------------------------------------------------


def test_static_export():
    captured = export("static_mlp.py")
    assert captured.symbols == () and captured.symbol_of == {}
    assert captured.input_names == ("x",) and captured.output_names == ("output",)
    assert captured.model_file == (MODELS / "static_mlp.py").resolve()
    assert any("eval mode" in note for note in captured.notes)
    x = captured.example_inputs[0]
    spec = load_model_file(MODELS / "static_mlp.py")
    with torch.no_grad():
        expected = spec.model.eval()(x)  # same seed: same weights; eval mode: dropout off
    torch.testing.assert_close(run(captured, x), expected)
    assert not any(n.target == torch.ops.aten.dropout.default for n in captured.program.graph.nodes)


def test_dynamic_one_symbol():
    captured = export("dyn_seq.py")
    assert captured.symbols == (SymbolSpec("seq", 1, 64),)
    assert set(captured.symbol_of.values()) == {"seq"}
    assert symbol_ranges(captured) == {"seq": (1, 64)}
    placeholder = next(n for n in captured.program.graph.nodes if n.op == "placeholder" and n.name == "x")
    assert str(placeholder.meta["val"].shape[1]) in captured.symbol_of
    spec = load_model_file(MODELS / "dyn_seq.py")
    for seq in (1, 3, 64):
        x = torch.randn(2, seq, 8)
        torch.testing.assert_close(run(captured, x), spec.model(x), msg=f"seq={seq}")


def test_dynamic_two_symbols_shared_across_inputs():
    captured = export("dyn_two.py")
    assert captured.input_names == ("x", "mask")
    assert captured.output_names == ("output_0", "output_1")
    assert sorted(captured.symbol_of.values()) == ["batch", "seq"]
    assert symbol_ranges(captured) == {"batch": (1, 8), "seq": (1, 128)}
    x, mask = torch.randn(5, 7, 4), torch.ones(5, 7)
    a, b = run(captured, x, mask)
    assert a.shape == (5, 4) and b.shape == (5, 7)


def test_cli_range_is_what_is_captured():
    captured = export("dyn_two.py", "seq=2..16")
    assert symbol_ranges(captured) == {"batch": (1, 8), "seq": (2, 16)}


def test_min_one_kept_with_size_one_example():
    captured = export("size_one.py")
    assert symbol_ranges(captured) == {"seq": (1, 32)}  # not 2..32: only the traced example was enlarged
    assert captured.example_inputs[0].shape == (3, 1)
    assert any("traced with size 2" in note for note in captured.notes)
    tokens = torch.arange(3).reshape(3, 1)
    torch.testing.assert_close(run(captured, tokens), tokens.float().cumsum(1) + 1)


def test_merging_repeated_heads_keeps_seq_dynamic():
    # Min(16*seq, 32*seq) == 16*seq: torch 2.11 cannot prove it alone (exporter/min_max.py), 2.13 can.
    captured = export("repeat_heads.py")
    assert symbol_ranges(captured) == {"seq": (1, 2048)}
    k = torch.randn(2, 2, 3, 16)
    expected = k.repeat_interleave(2, dim=1) * 2
    torch.testing.assert_close(run(captured, k), expected)


def test_nested_outputs_flattened():
    captured = export("nested_out.py")
    assert captured.output_names == ("output_0", "output_1", "output_2")


def test_flat_dict_outputs_named_by_their_keys():
    captured = export("dict_out.py")
    assert captured.output_names == ("logits", "hidden_states")


def test_capture_directly_with_extra_decompositions():
    from torch._decomp import get_decompositions

    spec = load_model_file(MODELS / "dyn_seq.py")
    plan = resolve_symbols(spec)

    def ops(captured: CapturedProgram) -> set:
        return {n.target for n in captured.program.graph.nodes if n.op == "call_function"}

    assert torch.ops.aten._softmax.default in ops(capture(spec, plan.symbols, plan.dynamic_shapes, None))
    # The lowering passes a table of its own on top of torch's core-ATen one: softmax then decomposes.
    extra = get_decompositions([torch.ops.aten._softmax])
    decomposed = ops(capture(spec, plan.symbols, plan.dynamic_shapes, extra))
    assert torch.ops.aten._softmax.default not in decomposed
    assert torch.ops.aten.exp.default in decomposed


# --- specialisation and data-dependent control flow ------------------------------------------------


def test_loop_over_dynamic_size_is_refused_with_its_line():
    message = capture_error("loop.py")
    line = line_of("loop.py", "# LOOP")
    assert f"loop.py:{line} (for t in range(x.shape[1]):" in message
    assert "makes seq a constant (10)" in message
    assert "torch.cond / tensor ops instead of Python control flow on sizes" in message
    assert len(message.splitlines()) <= 3


def test_loop_is_fine_when_static():
    captured = export("loop.py", "seq=10..10")
    assert captured.program.graph is not None


def test_branch_on_size_is_refused_with_its_line():
    message = capture_error("shape_eq.py")
    line = line_of("shape_eq.py", "# BRANCH")
    assert f"shape_eq.py:{line} (if x.shape[1] == 16:" in message
    assert "seq != 16" in message


def test_data_dependent_branch_is_refused_with_its_line():
    message = capture_error("data_branch.py")
    line = line_of("data_branch.py", "# DATA")
    assert f"data_branch.py:{line} (if x.sum() > 0:" in message
    assert "values in a tensor" in message and "torch.where" in message


def test_item_is_refused_with_its_line():
    message = capture_error("item_size.py")
    assert f"item_size.py:{line_of('item_size.py', '# ITEM')}" in message
    assert ".item()" in message


def test_symbols_forced_equal():
    message = capture_error("equal_symbols.py")
    assert f"equal_symbols.py:{line_of('equal_symbols.py', '# EQUAL')}" in message
    assert "requires a == b" in message and "same symbol" in message


def test_code_needing_narrower_range_suggests_it():
    message = capture_error("needs_min.py")
    assert f"needs_min.py:{line_of('needs_min.py', '# NEEDS3')}" in message
    assert "--dynamic seq=3..32" in message


def test_the_guard_named_is_the_one_the_range_breaks():
    """Guards the declared range satisfies come first in the model (torch reports them as violated too); the
    message names the one that fails, and the run of sizes where it holds, which torch does not suggest."""
    message = capture_error("two_guards.py")
    assert f"two_guards.py:{line_of('two_guards.py', '# NEEDS16')}" in message
    assert "(h//8) != 1, which does not hold" in message and "--dynamic h=16..96" in message


def test_a_guard_on_either_of_two_sizes_is_judged_and_narrowed():
    """torch joins comparisons with `|`: the guard is evaluated over both ranges, and one symbol's range over
    which it holds whatever the other is (w = 3..8) is suggested."""
    message = capture_error("either_size.py")
    assert f"either_size.py:{line_of('either_size.py', '# EITHER')}" in message
    assert "(3*w - 6 > 0) | (3*h - 6 > 0), which does not hold" in message and "--dynamic w=3..8" in message


def test_a_guard_torch_keeps_without_narrowing_the_ranges_is_tried_over_them():
    """torch.export specialises int(sqrt(h * w)) to 4 under a guard it does not report against the ranges: the
    graph's own guard, tried at the ranges' corners, refuses it at capture (else every package of it fails
    verification, or with --verify=off reads the wrong elements)."""
    message = capture_error("sqrt_size.py")
    assert "holds only where math.trunc(torch.sym_float(w * h) ** 0.5) == 4, which fails at h=2, w=2" in message
    assert "hint: compute such sizes with integer ops" in message


def test_a_guard_that_holds_at_every_corner_is_also_tried_inside_the_ranges():
    message = capture_error("remainder_size.py")
    assert "holds only where math.trunc(torch.sym_float(w * h % 8) ** 0.5) == 2, which fails at h=4, w=4" in message


def test_a_guard_that_one_size_meets_is_called_a_static_size():
    message = capture_error("one_size.py")
    assert f"one_size.py:{line_of('one_size.py', '# BRANCH')}" in message
    assert "holds for seq = 12 only: the model as written supports that one size; declare it static " \
           "(--dynamic seq=12..12)" in message


def test_guards_in_python_modulo_floor_division_and_or_are_judged():
    """torch prints padding to a multiple (`-w % 4`) as PythonMod, // as FloorDiv, and joins conditions with
    `and` and `or`: read as Python computes them, a guard that holds everywhere is not called failing."""
    from aotpack.exporter.diagnose import _holds_over
    from aotpack.exporter.dynamic import SymbolSpec

    w = (SymbolSpec("w", 3, 40),)
    assert _holds_over("Mod(w + (PythonMod(-w, 4)), 4) == 0", w) is True
    assert _holds_over("FloorDiv(w + PythonMod(-w, 4), 2) != 1", w) is True
    assert _holds_over("w + (PythonMod(-w, 4)) == 20", w) is False
    # kthvalue with k = t // 4: torch joins its two range checks with `and`
    assert _holds_over("(w // 4) >= 1 and (w // 4) <= w", (SymbolSpec("w", 4, 64),)) is True
    assert _holds_over("(w // 4) >= 2 or w < 5", (SymbolSpec("w", 4, 64),)) is False


def test_code_needing_a_multiple_says_so():
    message = capture_error("multiple_of.py")
    assert f"multiple_of.py:{line_of('multiple_of.py', '# MULTIPLE')}" in message
    assert "needs n to be a multiple of 4" in message and "n = 4 * _n, _n in 1..16" in message


# --- other failures -------------------------------------------------------------------------------


def test_user_exception_in_forward():
    message = capture_error("user_raise.py")
    assert f"user_raise.py:{line_of('user_raise.py', '# RAISE')}" in message
    assert "RuntimeError" in message and "shape '[-1, 7]' is invalid for input of size 30" in message


def capture_error_through_library(tmp_path: Path, library: str, library_source: str, model_source: str) -> str:
    """The capture error of a model file that imports `library` from a site-packages of its own."""
    site = tmp_path / "site-packages"
    (site / library).mkdir(parents=True)
    (site / library / "__init__.py").write_text(library_source)
    model_file = tmp_path / "model.py"
    model_file.write_text(f"import sys\nimport torch\nsys.path.insert(0, {str(site)!r})\n" + model_source)
    spec = load_model_file(model_file)
    plan = resolve_symbols(spec)
    with pytest.raises(CaptureError) as info:
        capture(spec, plan.symbols, plan.dynamic_shapes)
    return str(info.value)


def test_error_inside_an_installed_library_names_the_library_line(tmp_path):
    message = capture_error_through_library(
        tmp_path, "fancylib",
        "import torch\n\n\nclass Fancy(torch.nn.Module):\n    def forward(self, x):\n"
        "        return x.last_hidden_state\n",
        "from fancylib import Fancy\n\nmodel = Fancy()\nexample_inputs = (torch.randn(2, 3),)\n")
    assert "forward() raised AttributeError" in message
    assert "raised at fancylib/__init__.py:6 (return x.last_hidden_state)" in message


def test_a_data_dependent_branch_inside_a_library_names_both_lines(tmp_path):
    """transformers' EnCodec pads by values it reads from a buffer: the message names the user's line that led
    there and the library's line with the branch."""
    message = capture_error_through_library(
        tmp_path, "branchylib",
        "import torch\n\n\nclass Branchy(torch.nn.Module):\n    def forward(self, x):\n"
        "        if x.sum() > 0:\n            return x\n        return -x\n",
        "from branchylib import Branchy\n\n\nclass Model(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.inner = Branchy()\n\n    def forward(self, x):\n"
        "        return self.inner(x) * 2  # CALL\n\n\nmodel = Model()\nexample_inputs = (torch.randn(2, 3),)\n")
    assert "model.py:13 (return self.inner(x) * 2  # CALL): it branches on the values in a tensor" in message
    assert "\n  at branchylib/__init__.py:6 (if x.sum() > 0:)" in message


def test_a_guard_added_inside_a_library_names_the_librarys_line(tmp_path):
    """torch keeps the last frames of a guard's stack only, none of them the user's here (nor in HF ResNet,
    Swin, HuBERT): the library's line is named rather than none."""
    message = capture_error_through_library(
        tmp_path, "deeplib",
        "import torch\n\n\nclass Stem(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.conv = torch.nn.Conv2d(3, 4, 3, stride=32, padding=1)\n\n    def forward(self, x):\n"
        "        y = self.conv(x)\n        return y.flatten(2).mean(-1) if y.shape[-1] != 1 else y[..., 0, 0]\n",
        "from deeplib import Stem\n\nmodel = Stem()\nexample_inputs = (torch.randn(1, 3, 64, 64),)\n"
        "dynamic_axes = {'x': {3: 'w'}}\ndynamic_ranges = {'w': (32, 96)}\n")
    assert "cannot keep w dynamic over 32..96: deeplib/__init__.py:10 (y = self.conv(x)) assumes" in message
    assert "could not find the line" not in message


def test_unsupported_python_shows_reason_and_line():
    message = capture_error("unsupported.py")
    assert f"unsupported.py:{line_of('unsupported.py', '# NUMPY')}" in message
    assert "torch.export cannot capture" in message and ".numpy()" in message
    assert "\n" not in message


def test_non_tensor_output_is_named():
    message = capture_error("int_output.py", chained=False)
    assert "returns the int 3 as output[1]['count'], not a tensor" in message


def test_buffer_mutation_is_inference_only():
    message = capture_error("buffer_update.py", chained=False)
    assert "updates buffer 'calls' in place" in message and "inference-only" in message
    assert f"buffer_update.py:{line_of('buffer_update.py', '# MUTATE')}" in message


def test_input_mutation_is_refused():
    message = capture_error("input_update.py", chained=False)
    assert "modifies its input 'x' in place" in message
    assert f"input_update.py:{line_of('input_update.py', '# MUTATE')}" in message


def test_no_torch_noise_on_stderr(capfd):
    capture_error("data_branch.py")
    out, err = capfd.readouterr()
    assert "def forward" not in err and "def forward" not in out


def test_two_specialised_symbols_name_both():
    message = capture_error("loop_two.py")
    assert f"loop_two.py:{line_of('loop_two.py', '# BATCH')}" in message
    assert "makes batch a constant (3)" in message
    assert "also specialised: seq" in message


def test_another_specialised_symbol_gets_the_range_its_guard_holds_over():
    message = capture_error("two_sizes_pooled.py")
    assert "declare --dynamic w=33..96" in message
    assert "(also specialised: h (its guard " in message and "holds for h in 33..96))" in message


@pytest.mark.parametrize("breakage", ["missing", "raises"])
def test_without_draft_export_the_symbol_is_still_named(monkeypatch, breakage):
    # draft_export and its report are private API: on a torch without them the message loses the line only.
    if breakage == "missing":
        monkeypatch.delattr(torch.export, "draft_export")
    else:

        def broken(*args, **kwargs):
            raise RuntimeError("changed API")

        monkeypatch.setattr(torch.export, "draft_export", broken)
    message = capture_error("loop.py")
    assert "cannot keep seq dynamic over 1..64" in message
    assert "makes seq a constant (10)" in message
    assert "could not find the line" in message


def test_axes_without_any_range_mean_static(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\nmodel = torch.nn.ReLU()\nexample_inputs = (torch.randn(2, 5),)\n"
        "dynamic_axes = {'input': {1: 'seq'}}\n"
    )
    captured = export_model(path, ())
    assert captured.symbols == () and captured.symbol_of == {}
    assert any("static shapes: no range given for seq" in note for note in captured.notes)
    assert any("eval mode" in note for note in captured.notes)


def test_examples_sharing_memory_are_traced_as_separate_inputs():
    """model(x, x) as the example must not make the package read one argument for both."""

    class Sub(torch.nn.Module):
        def forward(self, a, b):
            return a - 2 * b

    x = torch.randn(3, 4)
    spec = ModelSpec(Path(__file__), Sub(), (x, x), ("a", "b"), {}, {})
    captured = capture(spec)
    placeholders = [n for n in captured.program.graph.nodes if n.op == "placeholder"]
    assert all(len(n.users) == 1 for n in placeholders), captured.program.graph
    assert any("shares memory with input 'a'" in note for note in captured.notes)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    assert torch.allclose(captured.program.module()(a, b), a - 2 * b)
