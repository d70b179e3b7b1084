"""aotpack-run end to end, and the C++ unit tests of the runtime's hand-written parsers."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
from runtime_helpers import mlp_reference
from safetensors.numpy import load_file, save_file


def run_tool(build, *args, env=None):
    return subprocess.run(
        [str(build / "aotpack-run"), *map(str, args)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def assert_one_line_error(result, code: int, text: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("aotpack-run: "), result.stderr
    assert text in result.stderr, result.stderr


def test_unit_tests_of_the_cpp_parsers(runtime_build):
    result = subprocess.run(
        [str(runtime_build / "aotpack-unit-tests")], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_inputs_and_outputs_files(runtime_build, mlp_package, mlp_weights_np, tmp_path):
    x = np.random.default_rng(5).uniform(-1, 1, (5, 32)).astype(np.float32)
    save_file({"x": x}, tmp_path / "in.safetensors")
    result = run_tool(
        runtime_build,
        mlp_package,
        "--inputs",
        tmp_path / "in.safetensors",
        "--outputs",
        tmp_path / "out.safetensors",
        "--repeat",
        "3",
        "--threads",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert 'output "output": float32 [5, 10] = [' in result.stdout
    assert "load " in result.stdout and "first run " in result.stdout and "median of 3 runs" in result.stdout
    out = load_file(tmp_path / "out.safetensors")
    assert list(out) == ["output"]
    np.testing.assert_allclose(out["output"], mlp_reference(x, mlp_weights_np), rtol=1e-5, atol=1e-5)
    # The header is padded to a multiple of 8.
    header_len = int.from_bytes((tmp_path / "out.safetensors").read_bytes()[:8], "little")
    assert header_len % 8 == 0


def test_two_inputs_two_outputs(runtime_build, embed_package, embed_table, tmp_path):
    ids = np.random.default_rng(6).integers(0, 16, (2, 9))
    mask = np.random.default_rng(7).uniform(0, 1, (2, 9)).astype(np.float32)
    save_file({"mask": mask, "input_ids": ids}, tmp_path / "in.safetensors")
    result = run_tool(
        runtime_build,
        embed_package,
        "--inputs",
        tmp_path / "in.safetensors",
        "--outputs",
        tmp_path / "out.safetensors",
        "--repeat",
        "0",
    )
    assert result.returncode == 0, result.stderr
    out = load_file(tmp_path / "out.safetensors")
    np.testing.assert_allclose(out["embeddings"], embed_table[ids] * mask[..., None], rtol=1e-6)
    np.testing.assert_array_equal(out["flat"], ids.reshape(-1) + 1)
    assert "median" not in result.stdout


def test_random_inputs_at_the_maxima_or_sym(runtime_build, mlp_package, embed_package):
    result = run_tool(runtime_build, mlp_package)
    assert result.returncode == 0, result.stderr
    assert 'output "output": float32 [64, 10]' in result.stdout
    result = run_tool(runtime_build, mlp_package, "--sym", "batch=3")
    assert 'output "output": float32 [3, 10]' in result.stdout
    result = run_tool(runtime_build, embed_package, "--sym", "batch=2", "seq=5", "--threads=3")
    assert result.returncode == 0, result.stderr
    assert 'output "embeddings": float32 [2, 5, 8]' in result.stdout
    assert 'output "flat": int64 [10] = [' in result.stdout


def test_random_values_are_not_zeros(runtime_build, mlp_package, tmp_path):
    result = run_tool(runtime_build, mlp_package, "--sym", "batch=2", "--outputs", tmp_path / "o.safetensors")
    assert result.returncode == 0
    out = load_file(tmp_path / "o.safetensors")["output"]
    assert np.unique(out).size > 10


def test_runs_from_a_prefix_layout(runtime_build, mlp_package, tmp_path):
    """aotpack-run in <prefix>/bin finds libaotpack.so.0 (its SONAME) in <prefix>/lib through its rpath."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    shutil.copy2(runtime_build / "aotpack-run", tmp_path / "bin")
    shutil.copy2(runtime_build / "libaotpack.so.0", tmp_path / "lib")  # the file the symlink names
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    result = subprocess.run(
        [str(tmp_path / "bin" / "aotpack-run"), str(mlp_package), "--sym", "batch=1"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "args,text",
    [
        ([], "missing PACKAGE"),
        (["--threads", "x", "P"], '--threads expects an integer, got "x"'),
        (["--threads", "0", "P"], "--threads must be 1..1024"),
        (["--bogus", "P"], "unknown option --bogus"),
        (["P", "Q"], 'unexpected argument "Q"'),
        (["P", "--inputs"], "--inputs expects a value"),
        (["P", "--device", "tpu"], '--device is "tpu"; expected cpu, cuda or cuda:N'),
        (["P", "--sym", "batch"], '--sym expects NAME=VALUE, got "batch"'),
        (["P", "--sym", "batch=2", "--inputs", "in.safetensors"], "--sym sets the sizes of generated inputs"),
    ],
)
def test_usage_errors(runtime_build, args, text):
    assert_one_line_error(run_tool(runtime_build, *args), 2, text)


def test_unknown_symbol_is_a_usage_error(runtime_build, mlp_package):
    assert_one_line_error(
        run_tool(runtime_build, mlp_package, "--sym", "seq=3"),
        2,
        '--sym seq: the model has no symbol "seq" (its symbols: batch)',
    )


def test_help(runtime_build):
    result = run_tool(runtime_build, "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: aotpack-run PACKAGE")


def test_cuda_is_a_clear_error(runtime_build, mlp_package):
    assert_one_line_error(
        run_tool(runtime_build, mlp_package, "--device", "cuda"), 1, "the package has no CUDA kernels"
    )


def test_runtime_errors_exit_1(runtime_build, mlp_package, tmp_path):
    assert_one_line_error(
        run_tool(runtime_build, tmp_path / "missing.aotpack"),
        1,
        f"package {tmp_path / 'missing.aotpack'}: no such file",
    )
    assert_one_line_error(
        run_tool(runtime_build, mlp_package, "--sym", "batch=100"),
        1,
        'input "x" dim 0 (batch) = 100 is outside the declared range 1..64',
    )
    bad = tmp_path / "bad.aotpack"
    bad.write_bytes(mlp_package.read_bytes()[:-100])
    assert_one_line_error(run_tool(runtime_build, bad), 1, f"package {bad}: ")


def test_inputs_file_problems(runtime_build, embed_package, mlp_package, tmp_path):
    ids = np.ones((1, 4), np.int64)
    save_file({"input_ids": ids}, tmp_path / "missing.safetensors")
    assert_one_line_error(
        run_tool(runtime_build, embed_package, "--inputs", tmp_path / "missing.safetensors"),
        1,
        'has no tensor "mask" (the model\'s inputs are: input_ids, mask)',
    )
    save_file(
        {"input_ids": ids, "mask": np.ones((1, 4), np.float32), "extra": ids, "more": ids},
        tmp_path / "extra.safetensors",
    )
    assert_one_line_error(
        run_tool(runtime_build, embed_package, "--inputs", tmp_path / "extra.safetensors"),
        1,
        'has tensors the model does not take: "extra", "more"',
    )
    save_file({"x": np.ones((2, 32), np.float64)}, tmp_path / "f64.safetensors")
    assert_one_line_error(
        run_tool(runtime_build, mlp_package, "--inputs", tmp_path / "f64.safetensors"),
        1,
        'input "x": dtype is float64, expected float32',
    )
    (tmp_path / "junk.safetensors").write_bytes(b"\x01")
    assert_one_line_error(
        run_tool(runtime_build, mlp_package, "--inputs", tmp_path / "junk.safetensors"),
        1,
        "too short for a safetensors file",
    )
    assert_one_line_error(
        run_tool(runtime_build, mlp_package, "--inputs", tmp_path / "none.safetensors"),
        1,
        "cannot read the inputs file",
    )


def test_kernel_error_exit_1(runtime_build, embed_package, tmp_path):
    save_file(
        {"input_ids": np.full((1, 2), 99, np.int64), "mask": np.ones((1, 2), np.float32)},
        tmp_path / "in.safetensors",
    )
    assert_one_line_error(
        run_tool(runtime_build, embed_package, "--inputs", tmp_path / "in.safetensors"),
        1,
        "step 0 (kernel k_embed) failed: index 99 is out of range for a table of 16 rows",
    )


def test_no_verify(runtime_build, mlp_package, tmp_path):
    from runtime_helpers import SOURCE, flip_byte

    path = flip_byte(mlp_package, tmp_path / "p.aotpack", SOURCE, 3)
    assert run_tool(runtime_build, path).returncode == 1
    assert run_tool(runtime_build, path, "--no-verify", "--sym", "batch=1").returncode == 0


def test_sym_values_are_checked_before_any_input_is_allocated(runtime_build, embed_package):
    """--sym far outside the range (2^40) says so at once; it used to allocate and fill the inputs first (36 s
    for seq=4000000) or fail as "out of memory". The time bound shows nothing was allocated or filled."""
    import time

    for value in (4000000, 2**40):
        start = time.monotonic()
        result = run_tool(runtime_build, embed_package, "--sym", f"seq={value}", "batch=4")
        assert time.monotonic() - start < 10
        assert_one_line_error(
            result, 1,
            f'--sym seq={value}: input "input_ids" dim 1 (seq) = {value} is outside the declared range 1..2048',
        )
    assert_one_line_error(run_tool(runtime_build, embed_package, "--sym", "batch=0"), 1,
                          '--sym batch=0: input "input_ids" dim 0 (batch) = 0 is outside the declared range 1..4')
