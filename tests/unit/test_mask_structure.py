"""Index math (lowering/ir/index_math.py) and the causal structure proved from attention masks
(lowering/ir/mask_structure.py), on hand-made scalar expressions: spellings that are causal, ones that only look
it, and the mask terms left over."""

from __future__ import annotations

import pytest
import sympy
from aotpack.lowering.ir.index_math import as_index_expr, folded, linear_bounds, provably_in_range
from aotpack.lowering.ir.mask_structure import causal_offset, causal_split, with_decided_comparisons
from aotpack.lowering.ir.scalar import Const, IndexValue, Load, Op
from aotpack.lowering.ir.symbolic import index_var, size_symbol

b, h, i, j = (index_var("i", d) for d in range(4))
seq = size_symbol("seq")
NINF = Const(float("-inf"), "float32")
ZERO = Const(0.0, "float32")


def iv(expr) -> IndexValue:
    return IndexValue(sympy.sympify(expr), "int64")


def arange_at(expr) -> Op:
    """What the lowering makes of arange(...)[expr]: 0 + expr * 1, as int64 ops."""
    return Op("add", (Const(0, "int64"), Op("mul", (iv(expr), Const(1, "int64")), "int64")), "int64")


def cmp(name: str, a, c) -> Op:
    return Op(name, (a, c), "bool")


def additive(cond) -> Op:
    return Op("where", (cond, ZERO, NINF), "float32")


PAD = cmp("gt", Load("pad", b * seq + j, "float32"), ZERO)


def test_integer_ops_of_positions_fold_to_one_expression():
    assert as_index_expr(arange_at(i + 3)) == i + 3
    assert folded(Op("sub", (arange_at(j), Op("cast", (Const(2, "int32"),), "int64")), "int64")) == iv(j - 2)
    assert as_index_expr(Op("add", (Load("x", i, "int64"), iv(i)), "int64")) is None  # reads memory
    assert as_index_expr(Op("mul", (iv(i), Const(0.5, "float32")), "float32")) is None  # floats do not fold


def test_bounds_of_linear_index_math_are_exact_at_the_box_corners():
    assert linear_bounds(2 * i - j + 1, {i: seq - 1, j: seq - 1}) == (2 - seq, 2 * seq - 1)
    assert linear_bounds(i * j, {i: seq - 1, j: seq - 1}) is None
    assert linear_bounds(sympy.Min(i, 3), {i: seq - 1}) is None
    ranges = {seq: (1, 2048)}
    assert provably_in_range(i, seq, {i: seq - 1}, ranges)
    assert not provably_in_range(i + 1, seq, {i: seq - 1}, ranges)  # the last row would read past the end
    assert not provably_in_range(i - 1, seq, {i: seq - 1}, ranges)  # the first would be negative


@pytest.mark.parametrize("term, offset", [
    (cmp("le", arange_at(j), arange_at(i)), 0),  # transformers: kv_idx <= q_idx
    (cmp("ge", arange_at(i), arange_at(j)), 0),
    (cmp("lt", iv(j), iv(i + 1)), 0),
    (cmp("ge", Op("sub", (iv(i), iv(j)), "int64"), Const(-2, "int64")), 2),  # q - kv >= -2
    (Op("logical_not", (cmp("gt", iv(j), iv(i + seq)),), "bool"), seq),  # not (j > i + seq)
    (cmp("le", iv(2 * j), iv(2 * i - 3)), -2),  # 2j <= 2i - 3 <=> j <= i - 2 (integers)
])
def test_causal_terms_are_proved_whatever_their_spelling(term, offset):
    assert causal_offset(term) == offset


@pytest.mark.parametrize("term", [
    cmp("ge", iv(j), iv(i)),  # anti-causal: keys after the row
    cmp("le", iv(j), iv(2 * i)),  # not a diagonal
    cmp("le", iv(j), iv(i + b)),  # a per-batch offset
    cmp("eq", iv(j), iv(i)),
    cmp("le", Load("pos", j, "int64"), iv(i)),  # positions read from data
])
def test_terms_that_only_look_causal_are_not(term):
    assert causal_offset(term) is None


def test_the_causal_term_is_split_off_and_the_padding_term_stays():
    causal = cmp("le", arange_at(j), arange_at(i))
    mask = additive(Op("bitwise_and", (Op("bitwise_and", (Const(True, "bool"), causal), "bool"), PAD), "bool"))
    split = causal_split(mask)
    assert split.offset == 0 and split.rest == additive(PAD)
    assert causal_split(Op("logical_and", (PAD, causal), "bool")).rest == PAD  # boolean masks too
    assert causal_split(additive(causal)).rest is None  # nothing else masks
    # an additive term beside it (ALiBi-like) stays, with the causal exclusion gone
    bias = Op("mul", (Op("cast", (iv(j - i),), "float32"), Const(0.5, "float32")), "float32")
    assert causal_split(Op("add", (additive(causal), bias), "float32")).rest == bias


def test_only_minus_infinity_and_false_count_as_exclusion():
    causal = cmp("le", iv(j), iv(i))
    lowest = Op("where", (causal, ZERO, Const(-3.4028234663852886e38, "float32")), "float32")
    assert causal_split(lowest) is None  # finfo.min: a fully masked row averages all keys; skipping would not
    assert causal_split(Op("where", (causal, NINF, ZERO), "float32")) is None  # masks the keys before the row
    assert causal_split(Op("logical_or", (causal, PAD), "bool")) is None  # either term admits a key


def test_comparisons_decided_over_the_mask_shape_are_folded():
    sizes = (sympy.Integer(2), sympy.Integer(4), seq, seq)
    ranges = {seq: (1, 2048)}
    mask = additive(Op("bitwise_and", (cmp("ge", arange_at(i), Const(0, "int64")), PAD), "bool"))
    assert with_decided_comparisons(mask, sizes, ranges) == additive(PAD)  # BERT's q_idx >= 0
    assert with_decided_comparisons(additive(cmp("lt", iv(j), iv(seq))), sizes, ranges) is None
    never = with_decided_comparisons(additive(cmp("gt", iv(j), iv(seq))), sizes, ranges)
    assert never == NINF
    undecided = additive(cmp("lt", iv(j), Const(5, "int64")))
    assert with_decided_comparisons(undecided, sizes, ranges) == undecided


def _packed_sequence_step(first_difference: int) -> Op:
    """transformers' `(diff(positions, prepend=positions[:, :1] - 1) != 1)` for aranged positions at r, as the
    lowering makes it (clamped neighbours of a cat), summed over r <= i1 by cumsum; `first_difference`
    replaces the prepended value's -1."""
    r = index_var("r", 0)
    here = Op("where", (cmp("lt", iv(r + 1), iv(1)), iv(-1), iv(sympy.Min(r, seq - 1))), "int64")
    before = Op("where", (cmp("lt", iv(r), iv(1)), iv(first_difference), iv(sympy.Max(0, sympy.Min(r - 1, seq - 1)))),
                "int64")
    jump = Op("cast", (cmp("ne", Op("sub", (here, before), "int64"), Const(1, "int64")),), "int64")
    return Op("where", (cmp("le", iv(r), iv(index_var("i", 1))), jump, Const(0, "int64")), "int64")


def test_a_sum_of_a_term_proved_zero_by_case_splits_needs_no_kernel():
    from aotpack.lowering.ir.constant_over_box import constant_over_box, constant_reduction

    r = index_var("r", 0)
    box = {index_var("i", 0): (sympy.Integer(0), sympy.Integer(1)), index_var("i", 1): (sympy.Integer(0), seq - 1),
           r: (sympy.Integer(0), seq - 1)}
    ranges = {seq: (1, 2048)}
    assert constant_over_box(_packed_sequence_step(-1), box, ranges) == 0  # needs the split at r = 1
    assert constant_over_box(_packed_sequence_step(5), box, ranges) is None  # the first position jumps
    shape, reduced = (sympy.Integer(2), seq), (seq,)
    assert constant_reduction(_packed_sequence_step(-1), shape, reduced, "sum", "int64", ranges) == Const(0, "int64")
    assert constant_reduction(Const(3, "int64"), shape, reduced, "sum", "int64", ranges) == IndexValue(3 * seq, "int64")
    assert constant_reduction(iv(r), shape, reduced, "sum", "int64", ranges) is None  # varies with r
    assert constant_reduction(_packed_sequence_step(-1), shape, reduced, "prod", "int64", ranges) is None


def test_equalities_of_zeros_in_a_mask_are_decided():
    sizes = (sympy.Integer(2), sympy.Integer(4), seq, seq)
    mask = additive(Op("bitwise_and", (cmp("le", iv(j), iv(i)), cmp("eq", Const(0, "int64"), Const(0, "int64"))),
                       "bool"))
    assert causal_split(with_decided_comparisons(mask, sizes, {seq: (1, 2048)})) == causal_split(additive(
        cmp("le", iv(j), iv(i))))


def test_tril_of_ones_is_causal():
    """torch's tril decomposition of a boolean all-true mask: where(j - i <= 1, true, false)."""
    tril = Op("where", (cmp("le", Op("sub", (iv(j), iv(i)), "int64"), Const(1, "int64")), Const(True, "bool"),
                        Const(False, "bool")), "bool")
    split = causal_split(tril)
    assert split.offset == 1 and split.rest is None
    either = Op("where", (cmp("le", iv(j), iv(i)), PAD, Const(True, "bool")), "bool")  # not a conjunction
    assert causal_split(either) is None


def test_a_mask_of_zero_and_minus_infinity_is_a_selection():
    """torch.export hands sdpa's boolean mask over as where(c, 0, -inf): adding it is selecting by c, which lets
    the kernels fold the scale into the exponential. Any other value added (1, finfo.min) keeps it additive."""
    from aotpack.lowering.ir.mask_structure import as_selection

    assert as_selection(additive(PAD)) == PAD
    assert as_selection(Op("cast", (additive(PAD),), "bfloat16")) == PAD
    assert as_selection(Op("where", (PAD, NINF, ZERO), "float32")) == Op("logical_not", (PAD,), "bool")
    causal = cmp("le", iv(j), iv(i))
    assert as_selection(Op("add", (additive(PAD), additive(causal)), "float32")) == \
        Op("logical_and", (PAD, causal), "bool")
    lowest = Const(-3.4028234663852886e38, "float32")
    assert as_selection(Op("where", (PAD, ZERO, lowest), "float32")) is None  # averages a fully masked row
    assert as_selection(Op("where", (PAD, Const(1.0, "float32"), NINF), "float32")) is None
    assert as_selection(Op("add", (additive(PAD), Load("bias", j, "float32")), "float32")) is None
    assert as_selection(Op("cast", (PAD,), "float32")) is None  # adds 1 or 0
    assert as_selection(PAD) is None
