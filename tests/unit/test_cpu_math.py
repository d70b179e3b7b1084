"""The C++ backend's own float math (templates/cpp/prelude.h.jinja: aotpack_exp, aotpack_tanh, aotpack_erf),
which every CPU kernel with a softmax, sigmoid, SiLU or GELU runs, against float64 references over its whole
range: the largest error in units in the last place of the float result, and NaN, infinities, overflow and
underflow kept. Compiled as packages compile it (x86-64-v3, -ffp-contract=off) and for x86-64-v2 (no FMA)."""

from __future__ import annotations

import math
import subprocess
import tempfile
from pathlib import Path

import jinja2
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = ("aotpack_exp", "aotpack_tanh", "aotpack_erf")
FLAGS = ["-std=c++17", "-O2", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off"]


def prelude() -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(REPO / "templates" / "cpp"), keep_trailing_newline=True)
    return env.get_template("prelude.h.jinja").render(scratch_bytes=0)


def evaluate(isa: str, xs: np.ndarray) -> dict[str, np.ndarray]:
    """Each function of FUNCTIONS at xs, computed by the prelude compiled for `isa`."""
    main = """
#include <cstdio>
#include <vector>
int main(int argc, char** argv) {
  FILE* in = std::fopen(argv[1], "rb");
  std::vector<float> x;
  float v;
  while (std::fread(&v, 4, 1, in) == 1) x.push_back(v);
  std::fclose(in);
  FILE* out = std::fopen(argv[2], "wb");
  std::vector<float> y(x.size());
""" + "".join(f"""  for (size_t i = 0; i < x.size(); ++i) y[i] = {name}(x[i]);
  std::fwrite(y.data(), 4, y.size(), out);
""" for name in FUNCTIONS) + """  std::fclose(out);
}
"""
    with tempfile.TemporaryDirectory() as tmp:
        source, exe = Path(tmp) / "math.cpp", Path(tmp) / "math"
        # the prelude's helpers sit in an anonymous namespace: main goes into the same file
        source.write_text(prelude() + main)
        subprocess.run(["g++", *FLAGS, f"-march={isa}", f"-I{REPO / 'runtime_cpp' / 'include'}", str(source),
                        "-o", str(exe)], check=True)
        (Path(tmp) / "x.bin").write_bytes(xs.astype(np.float32).tobytes())
        subprocess.run([str(exe), str(Path(tmp) / "x.bin"), str(Path(tmp) / "y.bin")], check=True)
        ys = np.frombuffer((Path(tmp) / "y.bin").read_bytes(), dtype=np.float32).reshape(len(FUNCTIONS), -1)
    return dict(zip(FUNCTIONS, ys))


def references(xs: np.ndarray) -> dict[str, np.ndarray]:
    x = xs.astype(np.float64)
    with np.errstate(over="ignore"):
        return {"aotpack_exp": np.exp(x), "aotpack_tanh": np.tanh(x),
                "aotpack_erf": np.array([math.erf(v) for v in x])}


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the float spacing at want (float32's smallest spacing below its normal range)."""
    want32 = np.minimum(np.abs(want), np.finfo(np.float32).max).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # the largest float's spacing; inf - inf where both overflow
        spacing = np.maximum(np.spacing(want32), np.float32(2.0 ** -149)).astype(np.float64)
        return np.abs(got.astype(np.float64) - want) / spacing


def sample() -> np.ndarray:
    rng = np.random.default_rng(0)
    parts = [np.linspace(-110.0, 95.0, 200_001), rng.uniform(-1, 1, 100_000), rng.uniform(-12, 12, 100_000),
             np.array([0.0, -0.0, 1e-30, -1e-30, 1e-6, 88.72, 88.73, -87.33, -103.9, -104.1])]
    return np.concatenate(parts).astype(np.float32)


# The largest errors allowed (measured: exp 0.99 ulp with fused multiply-adds, 0.96 without; tanh 1.27 ulp;
# erf 2.5e-7): exp's range reduction and polynomial round to within an ulp; tanh composes it with a division;
# erf's A&S 7.1.26 form away from 0 is accurate to 1.5e-7 absolute before rounding, which is many ulp where
# erf is small, so it is checked absolutely.
EXP_ULP = 1.0
TANH_ULP = 2.0
ERF_ABS = 3e-7


@pytest.mark.parametrize("isa", ["x86-64-v3", "x86-64-v2"])
def test_float_math_against_float64(isa):
    xs = sample()
    got, want = evaluate(isa, xs), references(xs)
    normal_exp = (want["aotpack_exp"] >= np.finfo(np.float32).tiny) & (want["aotpack_exp"] < 3.4e38)
    assert ulp_error(got["aotpack_exp"], want["aotpack_exp"])[normal_exp].max() <= EXP_ULP
    # below float32's normal range, exp is a subnormal or zero, within the spacing there
    small = want["aotpack_exp"] < np.finfo(np.float32).tiny
    assert np.abs(got["aotpack_exp"][small] - want["aotpack_exp"][small]).max() <= 2.0 ** -148
    assert np.isinf(got["aotpack_exp"][xs > 88.73]).all()
    assert ulp_error(got["aotpack_tanh"], want["aotpack_tanh"]).max() <= TANH_ULP
    assert np.abs(got["aotpack_erf"] - want["aotpack_erf"]).max() <= ERF_ABS


def test_special_values_are_kept():
    xs = np.array([np.nan, np.inf, -np.inf], dtype=np.float32)
    got = evaluate("x86-64-v3", xs)
    assert np.isnan(got["aotpack_exp"][0]) and got["aotpack_exp"][1] == np.inf and got["aotpack_exp"][2] == 0
    assert np.isnan(got["aotpack_tanh"][0]) and got["aotpack_tanh"][1] == 1 and got["aotpack_tanh"][2] == -1
    assert np.isnan(got["aotpack_erf"][0]) and got["aotpack_erf"][1] == 1 and got["aotpack_erf"][2] == -1
