"""The Triton prelude's float32 erf and sigmoid (`_erf_f32`, `_sigmoid_f32`: what every float32 and half erf and
sigmoid lower to) against float64 torch, run in Triton's interpreter over a sweep of float32 values and the
special ones. The interpreter computes exp2 and the division exactly where the GPU approximates them (about
2 ulp each), so the GPU tests (tests/gpu/test_gpu_ops.py) check the compiled forms against eager."""

from __future__ import annotations

import pytest
from triton_interp import run_in_interpreter

FAST_MATH_SCRIPT = r"""
import json, sys
import torch
import triton
sys.path.insert(0, sys.argv[1])
from triton_interp import load_module
from aotpack.lowering.codegen.templates import template_env

kernel = '''

@triton.jit
def math_kernel(x_ptr, erf_ptr, sigmoid_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n, other=0)
    tl.store(erf_ptr + i, _erf_f32(x), mask=i < n)
    tl.store(sigmoid_ptr + i, _sigmoid_f32(x), mask=i < n)
'''
module = load_module(template_env("triton").get_template("prelude.py.jinja").render() + kernel, interpret=True)

# every 4093rd float32 bit pattern from the smallest subnormal to 4.5, both signs, then the special values
positive = torch.arange(1, 0x40900000, 4093, dtype=torch.int64).to(torch.int32).view(torch.float32)
specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3.924999952316284, 3.93, 5.0, -5.0,
                         1e30, -1e30, 1e-45, -1e-45])
x = torch.cat([positive, -positive, specials])
out = torch.empty_like(x)
sig = torch.empty_like(x)
block = 1 << 16
module.math_kernel[(triton.cdiv(x.numel(), block),)](x, out, sig, x.numel(), BLOCK=block)
sig_exact = torch.sigmoid(x.double())
moderate = x.abs() < 10
exact = torch.erf(x.double())
error = (out.double() - exact).abs()
normal = torch.isfinite(x) & (exact.abs() >= torch.finfo(torch.float32).tiny)
subnormal = torch.isfinite(x) & (exact.abs() < torch.finfo(torch.float32).tiny)
tail = specials.numel()
print(json.dumps({
    "count": int(x.numel()), "max_rel": (error / exact.abs())[normal].max().item(),
    "max_subnormal_error": error[subnormal].max().item(), "max_abs_value": out[~torch.isnan(out)].abs().max().item(),
    "odd": bool(torch.equal(out[:positive.numel()], -out[positive.numel():2 * positive.numel()])),
    "specials": [None if v != v else v for v in out[-tail:].tolist()],
    "zero_signs": [str(v) for v in out[-tail:-tail + 2].tolist()],
    "sigmoid_max_rel": ((sig.double() - sig_exact).abs() / sig_exact)[moderate].max().item(),
    "sigmoid_max_abs": (sig.double() - sig_exact)[torch.isfinite(x)].abs().max().item(),
    "sigmoid_specials": [None if v != v else v for v in sig[-tail:].tolist()],
}))
"""


def test_erf_and_sigmoid_f32_are_within_a_few_ulp_of_float64():
    report = run_in_interpreter(FAST_MATH_SCRIPT)
    assert report["count"] > 500_000
    # scripts/fit_erf.py measures at most 5 ulp (3.26e-7 relative) with fused multiply-adds, as kernels compile;
    # the interpreter rounds each multiply and add apart, so a little more room
    assert report["max_rel"] < 5e-7, report
    assert report["max_subnormal_error"] <= 2 * 1.401298464324817e-45  # two steps of the smallest subnormal
    assert report["max_abs_value"] <= 1.0
    assert report["odd"]
    zero, neg_zero, inf, ninf, nan, clamp, past_clamp, five, minus_five, huge, minus_huge, tiny, minus_tiny = \
        report["specials"]
    assert zero == neg_zero == 0.0 and report["zero_signs"] == ["0.0", "-0.0"]
    assert (inf, ninf, five, minus_five, huge, minus_huge) == (1.0, -1.0, 1.0, -1.0, 1.0, -1.0)
    assert nan is None
    assert clamp == pytest.approx(1.0, abs=3e-7) and past_clamp == clamp
    assert tiny == pytest.approx(1.1283791670955126 * 1e-45, rel=0.5) and minus_tiny == -tiny
    # sigmoid: the interpreter's exp2 is exact, so what is left is x * log2(e)'s rounding (a few ulp for |x| < 10)
    assert report["sigmoid_max_rel"] < 1e-6, report
    assert report["sigmoid_max_abs"] < 1e-7, report
    sig_zero, sig_neg_zero, sig_inf, sig_ninf, sig_nan, *_, sig_huge, sig_minus_huge, sig_tiny, _ = \
        report["sigmoid_specials"]
    assert (sig_zero, sig_neg_zero, sig_inf, sig_ninf, sig_huge, sig_minus_huge, sig_tiny) == (0.5, 0.5, 1.0, 0.0, 1.0, 0.0, 0.5)
    assert sig_nan is None
