"""examples/*: export -> package file -> C++ runtime -> compare with eager, across every declared range."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from exported import check_against_eager, export, make_inputs, range_points

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CASES = {
    "mlp": (),
    "cnn": (),
    "transformer_block": (),
}
# Hugging Face architectures, run by test_hf_models.py at points of their own (padding masks, batch and length
# corners up to seq 2048), each exported once there.
HF_EXAMPLES = ("bert", "gpt2", "llama", "vit")


def test_every_example_is_run_by_the_tests():
    folders = {p.parent.name for p in EXAMPLES.glob("*/model.py")}
    assert folders == set(CASES) | set(HF_EXAMPLES), "add the new example to CASES (or to test_hf_models.py)"


@pytest.mark.parametrize("example", sorted(CASES))
def test_example_matches_eager_over_its_ranges(example, runtime_build, tmp_path, rt):
    exported = export(EXAMPLES / example / "model.py", tmp_path, CASES[example])
    assert exported.result.manifest["verification"]["passed"]
    assert exported.signature["symbols"], f"{example} should declare dynamic dims"
    model = rt.Model(exported.result.path)
    for threads in (1, 2):
        session = model.session(num_threads=threads)
        for seed, point in enumerate(range_points(exported.signature["symbols"])):
            inputs = make_inputs(exported, point, seed)
            check_against_eager(exported, session, inputs)


def test_out_of_range_input_is_refused_with_the_symbol(runtime_build, tmp_path, rt):
    exported = export(EXAMPLES / "transformer_block" / "model.py", tmp_path)
    session = rt.Model(exported.result.path).session()
    too_long = np.random.default_rng(0).standard_normal((2, 257, 64), dtype=np.float32)
    with pytest.raises(rt.AotpackError, match=r'input "x" dim 1 \(seq\) = 257 is outside the declared range 1\.\.256'):
        session.run([too_long])
