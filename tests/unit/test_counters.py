"""codegen/counters.py: the divisions of a loop over consecutive values, counted. Each expression is checked
value for value against evaluating it directly, once by a Python model of the counting and once by the C++
loop the CPU backend writes (backends/cpu/spelling.py's counted_loop), compiled and run."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
import sympy
from aotpack.lowering.backends.cpu.spelling import counted_loop
from aotpack.lowering.codegen.counters import CountedExpr, count_divisions
from aotpack.lowering.ir.symbolic import evaluate, size_symbol
from torch.utils._sympy.functions import FloorDiv, ModularIndexing, PythonMod

x = sympy.Symbol("g2", integer=True)
h, w = size_symbol("h"), size_symbol("w")
SIZES = {h: 5, w: 7}

# a [batch, h, w] image's column as a padded convolution's input offset: (x // w) % h rows, x // (h w) images
CONV_COLUMN = 3 * (w + 2) * (h + 2) * FloorDiv(x, h * w) + (w + 2) * ModularIndexing(x, w, h) + PythonMod(x, w)
CASES = {
    "conv_column": (CONV_COLUMN, 3),
    "offset_argument": (FloorDiv(x - 3, w) * 100 + PythonMod(x + 2, w), 2),  # negative before the start
    "nested_offset": (PythonMod(FloorDiv(x, w) + 1, h) + 10 * FloorDiv(FloorDiv(x, w) + 1, h), 2),
    "constant_divisor": (FloorDiv(x, 4) + 8 * PythonMod(x, 4), 1),
    "left_alone": (FloorDiv(2 * x, w) + FloorDiv(x * x, w) + x, 0),  # not x + c: divided in every step
}


def simulate(counted: CountedExpr, values: dict, start: int, count: int) -> list[int]:
    """The counting in Python, as the C++ loop does it."""
    sym = dict(values)
    digits = counted.digits
    for d in digits:
        arg, div = evaluate(d.argument, {**sym, x: start}), evaluate(d.divisor, sym)
        sym[d.quotient], sym[d.remainder] = arg // div, arg % div

    def step(parent):
        for i in counted.children(parent):
            d = digits[i]
            sym[d.remainder] += 1
            if sym[d.remainder] == evaluate(d.divisor, values):
                sym[d.remainder] = 0
                sym[d.quotient] += 1
                step(i)

    out = []
    for v in range(start, start + count):
        out.append(evaluate(counted.expr, {**sym, x: v}))
        step(None)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_counting_gives_what_dividing_gives(case):
    expr, n_digits = CASES[case]
    counted = count_divisions(expr, x, "c_")
    assert len(counted.digits) == n_digits
    if n_digits:
        assert not any(isinstance(a, FloorDiv) and x in a.free_symbols for a in counted.expr.atoms(FloorDiv))
    for start in (0, 1, 34, 69):  # from 0, and from inside a row, an image and across the last image
        direct = [evaluate(expr, {**SIZES, x: v}) for v in range(start, start + 80)]
        assert simulate(counted, SIZES, start, 80) == direct


def test_a_quotient_shared_by_a_floor_division_and_a_modular_index_is_counted_once():
    counted = count_divisions(FloorDiv(x, w) + ModularIndexing(x, w, h), x, "c_")
    assert [(d.argument, d.divisor) for d in counted.digits] == [(x, w), (counted.digits[0].quotient, h)]


PRELUDE = """
#include <cstdint>
#include <cstdio>
inline int64_t aotpack_floordiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int64_t aotpack_mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""


def run_counted_loop(expr: sympy.Expr, values: dict, start: int, count: int) -> list[int]:
    lines = counted_loop(count_divisions(expr, x, "c_"), {h: "s_h", w: "s_w"}, "c", "n", "g2", "n0",
                         "out[c] = $value;")
    body = "\n".join(lines)
    source = (PRELUDE + "int main(int argc, char** argv) {\n"
              f"  const int64_t s_h = {values[h]}, s_w = {values[w]}, n0 = {start}, n = {count};\n"
              f"  int64_t out[{count}];\n{body}\n"
              '  for (int64_t i = 0; i < n; ++i) std::printf("%lld\\n", (long long)out[i]);\n}\n')
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "loop.cpp"
        path.write_text(source)
        subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-Wno-unused-variable",
                        "-Wno-unused-but-set-variable", str(path), "-o", str(Path(tmp) / "loop")], check=True)
        done = subprocess.run([str(Path(tmp) / "loop")], capture_output=True, text=True, check=True)
    return [int(v) for v in done.stdout.split()]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cpp_loop_gives_what_dividing_gives(case):
    expr, _ = CASES[case]
    for start in (0, 34):
        assert run_counted_loop(expr, SIZES, start, 80) == [evaluate(expr, {**SIZES, x: v})
                                                           for v in range(start, start + 80)]


def test_a_divisor_below_one_divides_in_every_step_instead():
    # a divisor of w - 9 is negative at w = 7: counting would be wrong there, the loop divides instead
    expr = FloorDiv(x, w - 9) + 100 * PythonMod(x, w - 9)
    sizes = {h: 5, w: 7}
    assert run_counted_loop(expr, sizes, 3, 40) == [evaluate(expr, {**sizes, x: v}) for v in range(3, 43)]
