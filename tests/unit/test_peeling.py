"""codegen/peeling.py: the range of the innermost loop where a body's bounds tests hold, and the body there.

Each case's specialised body is compared with the original, value for value, at every point of the range the
peel reports, by a small evaluator of the scalar IR; the C++ kernels that use it run in tests/e2e/test_ops.py
(pads, crops, concatenations and replicate padding along a dynamic last dim) and tests/codegen/golden."""

from __future__ import annotations

import numpy as np
import sympy
from aotpack.lowering.codegen.peeling import peel
from aotpack.lowering.ir.scalar import Const, IndexValue, Indirect, Load, Node, Op
from aotpack.lowering.ir.symbolic import evaluate, index_var, size_symbol

x, row = index_var("i", 1), index_var("i", 0)
w = size_symbol("w")
RNG = np.random.default_rng(0)
DATA = {"a": RNG.standard_normal(64), "b": RNG.standard_normal(64)}
OPS = {"ge": np.greater_equal, "gt": np.greater, "le": np.less_equal, "lt": np.less, "logical_and": np.logical_and,
       "add": np.add, "mul": np.multiply, "neg": np.negative}


def run(node: Node, values: dict) -> float:
    if isinstance(node, Const):
        return node.value
    if isinstance(node, IndexValue):
        return evaluate(node.expr, values)
    if isinstance(node, Load):
        return DATA[node.buffer][evaluate(node.index, values)]
    args = [run(a, values) for a in node.args]
    if node.name == "where":
        return args[1] if args[0] else args[2]
    return OPS[node.name](*args)


def compare(a: Node, op: str, b: Node) -> Op:
    return Op(op, (a, b), "bool")


def index(e) -> IndexValue:
    return IndexValue(sympy.sympify(e), "int64")


def clamp(e, size):
    return sympy.Max(0, sympy.Min(e, size - 1))


# a constant pad of 1 before a row of w (the padded row is w + 2 long)
PAD = Op("where", (Op("logical_and", (compare(index(x - 1), "ge", Const(0, "int64")), compare(index(x - 1), "lt", index(w))),
                      "bool"), Load("a", clamp(x - 1, w), "float32"), Const(0.5, "float32")), "float32")
# cat([a[:w], -b[:w]]) along x: the second branch's clamp would need x >= w, which the first's range excludes
CAT = Op("where", (compare(index(x), "lt", index(w)), Load("a", sympy.Min(x, w - 1), "float32"),
                   Op("neg", (Load("b", sympy.Max(0, x - w), "float32"),), "float32")), "float32")
# replicate padding by 3: a clamp and no test
REPLICATE = Load("a", clamp(x - 3, w), "float32")
# a test of the outer index stays; the inner one goes
OUTER = Op("where", (Op("logical_and", (compare(index(row - 1), "ge", Const(0, "int64")),
                                        compare(index(x), "le", index(w - 2))), "bool"),
                     Load("a", 8 * row + x, "float32"), Const(0.0, "float32")), "float32")


def check(value: Node, extent, sizes: dict, expect: tuple[set, set]) -> None:
    peeled = peel(value, x)
    assert peeled is not None
    assert (set(peeled.lower), set(peeled.upper)) == expect
    for outer in (0, 1, 3):
        values = {**sizes, row: outer}
        lo = max([0, *(evaluate(b, values) for b in peeled.lower)])
        hi = min([evaluate(extent, values), *(evaluate(b, values) for b in peeled.upper)])
        assert hi > lo, "a range with nothing in it checks nothing"
        for v in range(lo, hi):
            assert run(peeled.body, {**values, x: v}) == run(value, {**values, x: v})


def test_a_pad_peels_to_a_plain_load_between_its_borders():
    peeled = peel(PAD, x)
    assert peeled.body == Load("a", x - 1, "float32")
    check(PAD, w + 2, {w: 9}, ({sympy.Integer(1)}, {w + 1}))


def test_a_concatenation_peels_to_its_first_input_and_ignores_the_other_branch_clamp():
    assert peel(CAT, x).body == Load("a", x, "float32")
    check(CAT, 2 * w, {w: 9}, (set(), {w}))


def test_replicate_padding_peels_where_its_clamp_is_its_argument():
    assert peel(REPLICATE, x).body == Load("a", x - 3, "float32")
    check(REPLICATE, w + 6, {w: 9}, ({sympy.Integer(3)}, {w + 3}))


def test_a_test_of_an_outer_index_is_kept():
    body = peel(OUTER, x).body
    assert body == Op("where", (compare(index(row - 1), "ge", Const(0, "int64")), Load("a", 8 * row + x, "float32"),
                                Const(0.0, "float32")), "float32")
    check(OUTER, w, {w: 7}, (set(), {w - 1}))


def test_what_is_not_plus_or_minus_the_loop_variable_is_left_alone():
    strided = Op("where", (compare(index(2 * x), "lt", index(w)), Load("a", sympy.Min(2 * x, w - 1), "float32"),
                           Const(0.0, "float32")), "float32")
    assert peel(strided, x) is None
    assert peel(Op("add", (Load("a", x, "float32"), Load("b", clamp(row, w), "float32")), "float32"), x) is None


def test_a_clamp_by_an_index_read_from_data_is_left_alone():
    # the bound would need x0, which the kernel reads inside the loop: no range is computed from it
    x0 = sympy.Symbol("x0", integer=True)
    gathered = Load("a", sympy.Min(x + x0, w - 1), "float32",
                    (Indirect(x0, Load("b", x, "int64"), w, False, "gather at model.py:1: an index is outside"),))
    assert peel(gathered, x) is None
