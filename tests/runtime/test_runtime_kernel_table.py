"""Kernels resolve only from the library's kernel table, and the plan is checked against it at load; a
library without a table (exported before tables) resolves names only among its own k_ functions."""

from __future__ import annotations

import numpy as np
import pytest
from aotpack.packages.writer import canonical_json
from runtime_helpers import (
    LIBRARY,
    MLP_KERNELS,
    kernel_table_source,
    mlp_program,
    mlp_reference,
    rewrite,
    write_test_package,
)


def load_error(rt, path):
    with pytest.raises(rt.AotpackError) as info:
        rt.Model(path)
    return info.value


@pytest.fixture(scope="module")
def legacy_mlp(packages_dir, mlp_weights_np):
    return write_test_package(packages_dir / "legacy_mlp.aotpack", mlp_program(), MLP_KERNELS, mlp_weights_np,
                              table=False)


def with_program(src, dst, edit):
    program = mlp_program()
    edit(program)
    return rewrite(src, dst, members={"program.json": canonical_json(program)})


def test_a_library_without_a_table_still_runs(rt, legacy_mlp, mlp_weights_np):
    x = np.random.default_rng(4).standard_normal((6, 32)).astype(np.float32)
    (y,) = rt.Model(legacy_mlp).session().run([x])
    np.testing.assert_allclose(y, mlp_reference(x, mlp_weights_np), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["abort", "exit", "free", "aotpack_kernel_abi_version"])
def test_a_library_without_a_table_never_resolves_other_functions(rt, legacy_mlp, tmp_path, name):
    path = with_program(legacy_mlp, tmp_path / "p.aotpack", lambda p: p["steps"][0].update(kernel=name))
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.NOT_FOUND
    assert f"program.json steps[0]: kernel {name} is not a kernel of the CPU kernel library {LIBRARY}" in str(e)


def test_table_symbols_must_match_the_program(rt, mlp_package, tmp_path, mlp_weights_np):
    renamed = with_program(mlp_package, tmp_path / "a.aotpack", lambda p: p["symbols"][0].update(name="rows"))
    e = load_error(rt, renamed)  # the manifest's signature still says batch: caught there first, or here
    assert e.code == rt.StatusCode.DATA_LOSS
    program = mlp_program()
    program["symbols"][0]["max"] = 32  # narrower than the table's 1..64: fine
    program["buffers"][3]["max_bytes"] = 8192
    program["buffers"][-1]["max_bytes"] = 1280
    program["arena_bytes"] = 8192
    narrower = write_test_package(tmp_path / "n.aotpack", program, MLP_KERNELS + kernel_table_source(mlp_program()),
                                  mlp_weights_np, table=False)
    rt.Model(narrower)
    program["symbols"][0]["max"] = 128  # wider than the kernels were made for
    program["buffers"][3]["max_bytes"] = 32768
    program["buffers"][-1]["max_bytes"] = 5120
    program["arena_bytes"] = 32768
    wider = write_test_package(tmp_path / "w.aotpack", program, MLP_KERNELS + kernel_table_source(mlp_program()),
                               mlp_weights_np, table=False)
    e = load_error(rt, wider)
    assert e.code == rt.StatusCode.DATA_LOSS
    assert "program.json symbols[0]: batch ranges over 1..128, wider than the 1..64 the kernels of" in str(e)


def test_a_truncated_library_is_refused_before_dlopen(rt, mlp_package, tmp_path):
    from runtime_helpers import read_entries

    so = dict(read_entries(mlp_package))[LIBRARY]
    for cut in (len(so) // 2, 100):
        e = load_error(rt, rewrite(mlp_package, tmp_path / f"t{cut}.aotpack", members={LIBRARY: so[:cut]}))
        assert e.code == rt.StatusCode.DATA_LOSS
        assert f"{LIBRARY} is not a whole kernel library: " in str(e)
