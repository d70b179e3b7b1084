"""Special functions the way eager PyTorch's CPU kernels compute them (aten/src/ATen/native/Math.h): erfinv,
ndtri, the modified Bessel functions i0, i0e, i1, i1e, digamma and trigamma (polygamma n = 0, 1), erfcx, and
the bit-level frexp and nextafter; with angle of real numbers and the bit shifts.

Each is a composition of scalar ops, one rule that both backends spell: the same algorithm, constants and
order of operations as eager's, so CPU and CUDA agree with it to rounding. Three ops exist for them: a
Chebyshev series (its recurrence would be a tree that doubles with each coefficient), erf to libm's accuracy
(erfinv's Newton steps divide erf's error by its derivative, up to 1e4 near |y| = 1) and a bit cast. Branches
are computed side by side and chosen with `where`, so every loop is unrolled to its bound. Half and integer
inputs are computed in float32 (as eager upcasts them), float64 in float64.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sympy
import torch

from ....errors import UnsupportedError
from ...ir.dtypes import DTYPES, is_float
from ...ir.scalar import Const, Node, Op, cast
from ..graph import GraphLowering, dtype_name
from ..registry import OptionalOps, lowers
from ..values import TensorValue, broadcast_to, from_buffer
from .index import indirect_load
from .pointwise import elementwise
from .special_tables import ERFCX_Y100

aten = OptionalOps(torch.ops.aten)
prims = OptionalOps(torch.ops.prims)


class V:
    """A scalar node with Python's arithmetic, in the node's own dtype: numbers become constants of it (so a
    float32 formula rounds its constants to float, as eager's `T{...}` does)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    @property
    def dtype(self) -> str:
        return self.node.dtype

    def const(self, value: Any) -> V:
        if isinstance(value, V):
            return value
        if self.dtype == "bool":
            return V(Const(bool(value), "bool"))
        return V(Const(float(value) if is_float(self.dtype) else int(value), self.dtype))

    def _op(self, name: str, other: Any, swap: bool = False, dtype: str | None = None) -> V:
        a, b = self.node, self.const(other).node
        return V(Op(name, (b, a) if swap else (a, b), dtype or self.dtype))

    def __add__(self, o: Any) -> V: return self._op("add", o)
    def __radd__(self, o: Any) -> V: return self._op("add", o, swap=True)
    def __sub__(self, o: Any) -> V: return self._op("sub", o)
    def __rsub__(self, o: Any) -> V: return self._op("sub", o, swap=True)
    def __mul__(self, o: Any) -> V: return self._op("mul", o)
    def __rmul__(self, o: Any) -> V: return self._op("mul", o, swap=True)
    def __truediv__(self, o: Any) -> V: return self._op("div", o)
    def __rtruediv__(self, o: Any) -> V: return self._op("div", o, swap=True)
    def __neg__(self) -> V: return V(Op("neg", (self.node,), self.dtype))
    def __lt__(self, o: Any) -> V: return self._op("lt", o, dtype="bool")
    def __le__(self, o: Any) -> V: return self._op("le", o, dtype="bool")
    def __gt__(self, o: Any) -> V: return self._op("gt", o, dtype="bool")
    def __ge__(self, o: Any) -> V: return self._op("ge", o, dtype="bool")
    def eq(self, o: Any) -> V: return self._op("eq", o, dtype="bool")
    def __rshift__(self, o: Any) -> V: return self._op("rshift", o)
    def __lshift__(self, o: Any) -> V: return self._op("lshift", o)

    def __and__(self, o: Any) -> V:
        return self._op("logical_and" if self.dtype == "bool" else "bitwise_and", o)

    def __or__(self, o: Any) -> V:
        return self._op("logical_or" if self.dtype == "bool" else "bitwise_or", o)

    def to(self, dtype: str) -> V:
        return V(cast(self.node, dtype))

    def bits(self, dtype: str) -> V:
        return V(Op("bitcast", (self.node,), dtype))


def fn(name: str, x: V) -> V:
    """A unary op of x's dtype (exp, log, sqrt, ...), or a test of it (isnan: bool; of a constant, folded)."""
    if name in ("isnan", "isinf"):
        if isinstance(x.node, Const):
            return V(Const(bool(getattr(math, name)(x.node.value)), "bool"))
        return V(Op(name, (x.node,), "bool"))
    return V(Op(name, (x.node,), x.dtype))


def where(cond: V, a: Any, b: Any, like: V | None = None) -> V:
    """a where cond holds, else b; numbers become constants of the other's dtype (or like's)."""
    like = like or (a if isinstance(a, V) else b)
    return V(Op("where", (cond.node, like.const(a).node, like.const(b).node), like.dtype))


def rounded(value: float, dtype: str) -> float:
    """`value` as a constant of `dtype` holds it: float32's nearest for a float32 formula."""
    return float(np.float32(value)) if dtype == "float32" else float(value)


def polevl(x: V, coefficients: Sequence[float]) -> V:
    """Cephes' polevl: Horner's rule from the highest coefficient, result = result * x + c."""
    out = x.const(coefficients[0])
    for c in coefficients[1:]:
        out = out * x + c
    return out


def chbevl(x: V, coefficients: Sequence[float]) -> V:
    """Cephes' chbevl: sum c_k T_k(x / 2), the recurrence as its own op (codegen/body.py chebyshev_series)."""
    return V(Op("chebyshev", (x.node, *(x.const(c).node for c in coefficients)), x.dtype))


# ---- erfinv --------------------------------------------------------------------------------------------------

# calc_erfinv: a rational first guess (central for |y| <= 0.7, else in sqrt(-log((1 - |y|) / 2))), then two
# Newton steps on erf.
_ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
_ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
_ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
_ERFINV_D = (3.543889200, 1.637067800)


def erfinv(y: V) -> V:
    a, b, c, d = _ERFINV_A, _ERFINV_B, _ERFINV_C, _ERFINV_D
    y_abs = fn("abs", y)
    z = y * y
    central = y * polevl(z, a[::-1]) / (polevl(z, b[::-1]) * z + 1.0)
    w = fn("sqrt", -fn("log", (1.0 - y_abs) / 2.0))
    num = polevl(w, c[::-1])
    tail = where(y < 0, -num, num) / polevl(w, (d[1], d[0], 1.0))  # copysign(num, y): num > 0 here
    x = where(y_abs <= 0.7, central, tail)
    two_over_sqrt_pi = rounded(2.0 * rounded(1.0 / math.sqrt(math.pi), y.dtype), y.dtype)
    for _ in range(2):
        x = x - (V(Op("precise_erf", (x.node,), x.dtype)) - y) / (fn("exp", -x * x) * two_over_sqrt_pi)
    edge = where(y > 0, math.inf, -math.inf, like=y)
    return where(y_abs > 1.0, math.nan, where(y_abs.eq(1.0), edge, x))


# ---- ndtri ---------------------------------------------------------------------------------------------------

# calc_ndtri (Cephes): a rational function of (y - 1/2)^2 for |y - 1/2| <= 3/8, else of 1/sqrt(-2 log y) over
# [2, 8) and [8, 64), on the smaller tail.
_NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
             1.39312609387279679503E1, -1.23916583867381258016E0)
_NDTRI_Q0 = (1.00000000000000000000E0, 1.95448858338141759834E0, 4.67627912898881538453E0,
             8.63602421390890590575E1, -2.25462687854119370527E2, 2.00260212380060660359E2,
             -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0)
_NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
             4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
             -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4)
_NDTRI_Q1 = (1.00000000000000000000E0, 1.57799883256466749731E1, 4.53907635128879210584E1,
             4.13172038254672030440E1, 1.50425385692907503408E1, 2.50464946208309415979E0,
             -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
             1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
             3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
_NDTRI_Q2 = (1.00000000000000000000E0, 6.02427039364742014255E0, 3.67983563856160859403E0,
             1.37702099489081330271E0, 2.16236993594496635890E-1, 1.34204006088543189037E-2,
             3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9)
_EXP_MINUS_2 = 0.13533528323661269189


def ndtri(y0: V) -> V:
    dt = y0.dtype
    e2 = rounded(_EXP_MINUS_2, dt)
    flip = y0 > rounded(1.0 - e2, dt)  # eager's `one - T{0.135...}`, in T
    y = where(flip, 1.0 - y0, y0)
    yc = y - 0.5
    y2 = yc * yc
    central = (yc + yc * (y2 * polevl(y2, _NDTRI_P0) / polevl(y2, _NDTRI_Q0))) * 2.50662827463100050242
    x = fn("sqrt", fn("log", y) * -2.0)
    x0 = x - fn("log", x) / x
    z = 1.0 / x
    x1 = where(x < 8.0, z * polevl(z, _NDTRI_P1) / polevl(z, _NDTRI_Q1), z * polevl(z, _NDTRI_P2) / polevl(z, _NDTRI_Q2))
    tail = where(flip, x0 - x1, x1 - x0)
    out = where(y > e2, central, tail)
    out = where((y0 < 0) | (y0 > 1.0), math.nan, out)
    return where(y0.eq(0), -math.inf, where(y0.eq(1.0), math.inf, out))


# ---- modified Bessel functions of the first kind -------------------------------------------------------------

# Cephes' Chebyshev coefficients of exp(-x) I0(x) over [0, 8] (in x / 2 - 2) and of exp(-x) sqrt(x) I0(x) over
# (8, inf) (in 32 / x - 2); eager rounds them to float for float32.
_I0E_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
          1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
          -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
          9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
          -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
          1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
          -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
          1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
          -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
          1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0E_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
          3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
          1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
          -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
          7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
          -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
          3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
          2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
          8.04490411014108831608E-1)
# The same for I1. Eager's float32 tables are the double ones' last 17 and 7 terms (the rest are below float's
# resolution of the sum).
_I1E_A = (2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
          -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
          3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
          -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
          9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
          -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
          4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
          -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
          2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
          -1.76416518357834055153E-1, 2.52587186443633654823E-1)
_I1E_B = (7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
          -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
          -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
          4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
          -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
          3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10,
          -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
          -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
          7.78576235018280120474E-1)


def _bessel(x: V, kind: str) -> V:
    """calc_i0, calc_i0e, calc_i1 or calc_i1e: the [0, 8] and (8, inf) series of |x|, odd ones signed by x."""
    order_one = kind in ("i1", "i1e")
    single = x.dtype == "float32"
    a, b = (_I1E_A[-17:] if single else _I1E_A, _I1E_B[-7:] if single else _I1E_B) if order_one else (_I0E_A, _I0E_B)
    ax = fn("abs", x)
    inner = chbevl(ax / 2.0 - 2.0, a)
    outer = chbevl(32.0 / ax - 2.0, b)
    if kind == "i0":
        small, large = fn("exp", ax) * inner, fn("exp", ax) * outer / fn("sqrt", ax)
    elif kind == "i1":
        small, large = fn("exp", ax) * ax * inner, (fn("exp", ax) * outer) / fn("sqrt", ax)
    else:
        small, large = (inner * ax if order_one else inner), outer / fn("sqrt", ax)
    out = where(ax <= 8.0, small, large)
    return where(x < 0, -out, out) if order_one else out


# ---- digamma and trigamma ------------------------------------------------------------------------------------

_PSI_10 = 2.25175258906672110764
_DIGAMMA_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
              -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
              8.33333333333333333333E-2)


def digamma(x: V) -> V:
    """calc_digamma: reflected below 0 (pi / tan(pi r) in float64, r the fractional part), pushed up to
    x >= 10 by psi(x) = psi(x + 1) - 1 / x (at most 10 steps for x > 0, unrolled), then the asymptotic series."""
    neg = x < 0
    xp = where(neg, 1.0 - x, x)
    result = x.const(0.0)
    steps = [xp]
    for _ in range(10):
        steps.append(steps[-1] + 1.0)  # eager's x += 1, rounding as it does
    for s in steps[:-1]:
        result = result - where(s < 10.0, 1.0 / s, 0.0)  # r - 0 is r: a step past 10 changes nothing
    top = steps[-1]
    for s in reversed(steps[:-1]):  # the first step at or past 10
        top = where(s >= 10.0, s, top)
    z = 1.0 / (top * top)
    series = where(top < 1.0e17, z * polevl(z, _DIGAMMA_A), 0.0)
    pushed = where(top.eq(10.0), result + _PSI_10, result + fn("log", top) - 0.5 / top - series)
    wide = x.to("float64")
    r = wide - fn("trunc", wide)
    reflection = (math.pi / fn("tan", r * math.pi)).to(x.dtype)
    out = where(neg, pushed - reflection, pushed)
    out = where(neg & x.eq(fn("trunc", x)), math.nan, out)
    return where(x.eq(0.0), -(1.0 / x), out)  # copysign(inf, -x) at +-0


def trigamma(x: V) -> V:
    """Eager's trigamma: reflected below 1/2 by pi^2 / sin^2(pi x), six steps of 1 / x^2, then the series."""
    pi = rounded(math.pi, x.dtype)
    low = x < 0.5
    s = fn("sin", x * pi)
    result = where(low, 0.0 - rounded(pi * pi, x.dtype) / (s * s), 0.0)
    t = where(low, 1.0 - x, x)
    for _ in range(6):
        result = result + 1.0 / (t * t)
        t = t + 1.0
    ixx = 1.0 / (t * t)
    sixth, thirtieth, fortysecond = (rounded(1.0 / n, x.dtype) for n in (6, 30, 42))
    result = result + (1.0 + 1.0 / (t * 2.0) + ixx * (sixth - ixx * (thirtieth - ixx * fortysecond))) / t
    return where(low, -result, result)


# ---- erfcx ---------------------------------------------------------------------------------------------------


@functools.cache
def _erfcx_table() -> torch.Tensor:
    """ERFCX_Y100 with a last row for y100 = 100 (|x| below float's resolution of 4 + x), where eager's switch
    has no case and returns 1."""
    return torch.tensor([*ERFCX_Y100, (1.0, 0, 0, 0, 0, 0, 0)], dtype=torch.float64)


def erfcx(x: V, table: TensorValue) -> V:
    """calc_erfcx: for 0 <= x <= 50 a degree-6 polynomial of y100 = 400 / (4 + x) from a table of 100 (eager's
    switch, here a gather); above, a continued fraction; below 0, 2 exp(x^2) minus the table's. The table's
    polynomials and the continued fraction's numerator are evaluated in float64 as eager's double literals make
    them, and its comparisons with -26.7 and -6.1 too."""
    wide = x.to("float64")

    def y100_poly(y100: V) -> V:
        safe = where((y100 >= 0.0) & (y100 <= 100.0), y100, 0.0)  # NaN too: the gather stays in bounds
        row = safe.to("int64")
        t = (y100 * 2.0 - (row.to(x.dtype) * 2.0 + 1.0)).to("float64")
        what = "erfcx: a row of its coefficient table is out of range (an aotpack bug)"
        c = [V(indirect_load(table, [None, sympy.Integer(j)], 0, row.node, what, False)) for j in range(7)]
        out = c[6]
        for k in range(5, -1, -1):
            out = c[k] + out * t
        return out.to(x.dtype)

    ispi = rounded(0.56418958354775628694807945156, x.dtype)
    xx = x * x
    fraction = ((xx.to("float64") * (xx.to("float64") + 4.5) + 2.0) * ispi
                / (wide * ((xx * (xx + 5.0)).to("float64") + 3.75))).to(x.dtype)
    positive = where(x > 50.0, where(x > 5e7, ispi / x, fraction), y100_poly(400.0 / (x + 4.0)))
    twice_exp = fn("exp", xx) * 2.0
    negative = where(wide < -26.7, math.inf, where(wide < -6.1, twice_exp, twice_exp - y100_poly(400.0 / (4.0 - x))))
    return where(fn("isnan", x), x, where(x >= 0.0, positive, negative))


# ---- bits: frexp and nextafter -------------------------------------------------------------------------------

# Per float format computed in: the integer of its size, mantissa bits, exponent mask, and the smallest normal.
_FORMAT = {"float32": ("int32", 23, 0xFF, 2.0 ** -126), "float64": ("int64", 52, 0x7FF, 2.0 ** -1022)}


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def frexp(x: V) -> tuple[V, V]:
    """std::frexp from the bits: x = m 2^e with 1/2 <= |m| < 1 (subnormals scaled into the normal range
    first); 0, infinities and NaN are themselves with exponent 0, as glibc returns them."""
    int_t, mant, mask, tiny = _FORMAT[x.dtype]
    width = 32 if int_t == "int32" else 64
    bias = mask // 2 - 1  # the exponent field of 1/2
    sub = fn("abs", x) < tiny
    bits = where(sub, x * 2.0 ** (mant + 1), x).bits(int_t)
    exponent = ((bits >> mant) & mask) - bias - where(sub, V(Const(mant + 1, int_t)), 0)
    keep = _signed((1 << (width - 1)) | ((1 << mant) - 1), width)  # sign and mantissa
    mantissa = ((bits & keep) | (bias << mant)).bits(x.dtype)
    special = x.eq(0.0) | fn("isinf", x) | fn("isnan", x)
    return where(special, x, mantissa), where(special, V(Const(0, int_t)), exponent)


def nextafter(x: V, y: V, dtype: str) -> V:
    """std::nextafter from the bits: the neighbour of x towards y is one unit in x's last place away from
    (or towards) zero, the integer of x's bits plus or minus one; bfloat16 (float32's upper half) steps by
    2^16 in float32's bits. From zero, the smallest subnormal of `dtype` signed like y."""
    int_t = _FORMAT[x.dtype][0]
    step = 1 << 16 if dtype == "bfloat16" else 1
    smallest = {"float32": 2.0 ** -149, "float64": 2.0 ** -1074, "bfloat16": 2.0 ** -133}[dtype]
    away = V(Op("eq", ((y > x).node, (x > 0.0).node), "bool"))  # from zero: up for x > 0, down below
    moved = (x.bits(int_t) + where(away, V(Const(step, int_t)), -step)).bits(x.dtype)
    out = where(x.eq(0.0), where(y > 0.0, smallest, -smallest, like=x), moved)
    out = where(x.eq(y), y, out)
    return where(fn("isnan", x) | fn("isnan", y), x + y, out)


# ---- registration --------------------------------------------------------------------------------------------


def _compute(ctx: GraphLowering, node: torch.fx.Node) -> str:
    out = ctx.dtype_of(node)
    return "float32" if DTYPES[out].compute == "float32" else out


def _unary(ctx: GraphLowering, node: torch.fx.Node, x: Any, rule: Callable[[V], V]) -> TensorValue:
    return elementwise(ctx, node, [x], lambda v: rule(V(v)).node, _compute(ctx, node))


_UNARY: dict[str, tuple[Callable[[V], V], list[Any]]] = {
    "erfinv": (erfinv, [aten.erfinv, aten.special_erfinv]),
    "ndtri": (ndtri, [aten.special_ndtri]),
    "i0": (lambda x: _bessel(x, "i0"), [aten.i0, aten.special_i0]),
    "i0e": (lambda x: _bessel(x, "i0e"), [aten.special_i0e]),
    "i1": (lambda x: _bessel(x, "i1"), [aten.special_i1]),
    "i1e": (lambda x: _bessel(x, "i1e"), [aten.special_i1e]),
    "digamma": (digamma, [aten.digamma, aten.special_digamma, aten.special_psi]),
}


def _register_unary(rule: Callable[[V], V], targets: list[Any]) -> None:
    @lowers(*targets)
    def lower(ctx: GraphLowering, node: torch.fx.Node, x: Any) -> TensorValue:
        return _unary(ctx, node, x, rule)


for _rule, _targets in _UNARY.values():
    _register_unary(_rule, _targets)


@lowers(aten.polygamma, aten.special_polygamma)
def _polygamma(ctx: GraphLowering, node: torch.fx.Node, n: Any, x: Any) -> TensorValue:
    if n not in (0, 1):
        raise UnsupportedError(f"polygamma of order n={n}: aotpack computes n = 0 (digamma) and n = 1 (trigamma); "
                               "eager computes higher orders with a Hurwitz zeta series that stops where its terms "
                               "are small enough, which aotpack does not follow")
    return _unary(ctx, node, x, digamma if n == 0 else trigamma)


@lowers(aten.special_erfcx)
def _erfcx(ctx: GraphLowering, node: torch.fx.Node, x: Any) -> TensorValue:
    rows = _erfcx_table()
    table = from_buffer(ctx.weight(rows, "erfcx_y100"), "float64", tuple(sympy.Integer(s) for s in rows.shape))
    return _unary(ctx, node, x, lambda v: erfcx(v, table))


@lowers(aten.angle)
def _angle(ctx: GraphLowering, node: torch.fx.Node, x: Any) -> TensorValue:
    """Of a real number (complex tensors are refused earlier): pi below zero, else 0; NaN kept."""
    return _unary(ctx, node, x, lambda v: where(fn("isnan", v), v, where(v < 0, math.pi, 0.0, like=v)))


@lowers(aten.nextafter)
def _nextafter(ctx: GraphLowering, node: torch.fx.Node, x: Any, y: Any) -> TensorValue:
    out = ctx.dtype_of(node)
    if out == "float16":
        raise UnsupportedError("nextafter in float16 is not supported (float32, float64 and bfloat16 are)")
    return elementwise(ctx, node, [x, y], lambda a, b: nextafter(V(a), V(b), out).node, _compute(ctx, node))


@lowers(aten.frexp.Tensor)
def _frexp(ctx: GraphLowering, node: torch.fx.Node, x: TensorValue) -> tuple[TensorValue, TensorValue]:
    mantissa_dtype, exponent_dtype = (dtype_name(v.dtype) for v in node.meta["val"])
    shape = ctx.shape_of(node)
    compute = "float32" if DTYPES[mantissa_dtype].compute == "float32" else mantissa_dtype
    loader = broadcast_to(x, shape).loader

    def part(i: int, dtype: str) -> TensorValue:
        return TensorValue(dtype, shape, lambda idx: cast(frexp(V(cast(loader(idx), compute)))[i].node, dtype))

    return part(0, mantissa_dtype), part(1, exponent_dtype)


def _shift(name: str) -> Callable[..., TensorValue]:
    """Eager's bit shifts of integers: a shift by a negative count or by the width or more gives what shifting
    by the width would (0, or -1 for a negative number shifted right), never C's undefined shift."""

    def lower(ctx: GraphLowering, node: torch.fx.Node, a: Any, b: Any) -> TensorValue:
        out = ctx.dtype_of(node)
        if not DTYPES[out].kind == "int":
            raise UnsupportedError(f"{name} of {out}: eager shifts integers only")
        width = 8 * DTYPES[out].itemsize

        def shift(x: Node, count: Node) -> Node:
            v, n = V(x), V(count)
            bad = (n < 0) | (n >= width)
            if name == "rshift" and DTYPES[out].signed:  # the sign fills every bit
                return (v >> where(bad, width - 1, n)).node
            return where(bad, 0, V(Op(name, (x, where(bad, 0, n).node), out))).node

        return elementwise(ctx, node, [a, b], shift)

    return lower


lowers(aten.__lshift__, aten.bitwise_left_shift, prims.shift_left)(_shift("lshift"))
lowers(aten.__rshift__, aten.bitwise_right_shift, prims.shift_right_arithmetic)(_shift("rshift"))
