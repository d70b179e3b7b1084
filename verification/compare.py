"""How one output of a package is judged against PyTorch: the single rule that export, the tests and the GPU
scripts share (DESIGN.md §6).

Float32 outputs must match a float32 reference within FLOAT32_TOLERANCE. A half-precision output cannot:
the half type's own rounding already moves it by about 1e-2. So it is judged against the model run in
float32 (the weights before the `--dtype` cast), with the model run in the half type as the noise floor:
the package may be off by at most HALF_NOISE_FACTOR times what eager half precision is off, plus
HALF_NOISE_MARGIN. Comparing a half package with half eager instead compares two roundings with each other
and fails correct packages (issue 9: GPT-2 in bf16 at 1.4e-2 against bf16 eager, 1.3e-2 against float32
where bf16 eager is itself at 1.3e-2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

FLOAT32_TOLERANCE = 1e-5
# Only where a reference or a kernel multiplies float32 in TF32 (no aotpack kernel does: see codegen).
TF32_TOLERANCE = 1e-3
HALF_DTYPES = ("float16", "bfloat16")
HALF_NOISE_FACTOR = 1.5
HALF_NOISE_MARGIN = 1e-3

# Relative norm error allowed for full-precision float outputs, by dtype name.
TOLERANCE = {"float32": FLOAT32_TOLERANCE, "float64": FLOAT32_TOLERANCE}
FLOATING = (*HALF_DTYPES, *TOLERANCE)


# relative_error() works through outputs this many elements at a time: float64 copies of a whole GPT-2 logits
# tensor (2 x 2048 x 50257) would take 1.6 GB each and many passes; chunks stay in cache and use BLAS dots.
_CHUNK = 1 << 20


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """‖out − ref‖ / ‖ref‖ over finite reference elements (non-finite ones must match exactly)."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return float("inf")
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    diff_sq = ref_sq = 0.0
    for start in range(0, flat_ref.size, _CHUNK):
        o = flat_out[start:start + _CHUNK].astype(np.float64)
        r = flat_ref[start:start + _CHUNK].astype(np.float64)
        finite = np.isfinite(r)
        if not finite.all():
            odd_o, odd_r = o[~finite], r[~finite]
            if not (np.array_equal(np.isnan(odd_o), np.isnan(odd_r))
                    and np.array_equal(odd_o[~np.isnan(odd_r)], odd_r[~np.isnan(odd_r)])):
                return float("inf")
            o, r = o[finite], r[finite]
        d = o - r
        diff_sq += float(d @ d)  # nan or inf where the output is not finite: the error is then infinite
        ref_sq += float(r @ r)
    if np.isnan(diff_sq):
        return float("inf")
    return float(np.sqrt(diff_sq / ref_sq)) if ref_sq > 0 else float(np.sqrt(diff_sq))


def mismatch_report(name: str, out: np.ndarray, ref: np.ndarray) -> str:
    """What a failing comparison prints: shapes, errors and where the worst element is."""
    return f"{name}: {mismatch_details(out, ref)}"


def mismatch_details(out: np.ndarray, ref: np.ndarray) -> str:
    if out.shape != ref.shape:
        return f"shape {out.shape}, expected {ref.shape}"
    diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    if not diff.size:
        return f"rel err {relative_error(out, ref):.3e}, empty output of shape {out.shape}"
    worst = np.unravel_index(np.nanargmax(diff), diff.shape) if not np.isnan(diff).all() else (0,) * diff.ndim
    return (f"rel err {relative_error(out, ref):.3e}, max abs err {np.nanmax(diff):.3e}, "
            f"mean abs err {np.nanmean(diff):.3e}, shape {out.shape}, worst at {tuple(map(int, worst))}: "
            f"{out[worst]} vs {ref[worst]}")


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as the runtime takes it: bfloat16 (which numpy lacks) as its raw uint16 bits."""
    t = t.detach().cpu().contiguous()
    return t.view(torch.uint16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


def from_runtime(out: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """A runtime output as numbers: bfloat16 comes back as its raw uint16 bits, widened here to float32."""
    if dtype == torch.bfloat16:
        return (out.astype(np.uint32) << 16).view(np.float32)
    return out.astype(np.float32) if dtype == torch.float16 else out


def as_reference(t: torch.Tensor) -> np.ndarray:
    """A PyTorch result as numbers to compare with: half types widened to float32, on the host."""
    t = t.detach().cpu()
    return t.float().numpy() if t.dtype in (torch.bfloat16, torch.float16) else t.numpy()


def allowed_error(dtype: str, half_error: float | None = None, tf32: bool = False) -> float:
    """The largest relative error an output of `dtype` may have against its reference. With the half model's
    error given (a half-precision package), every floating output takes the half rule: a float32 output of a
    bfloat16 model is computed from bfloat16 values."""
    if dtype in HALF_DTYPES or (half_error is not None and dtype in FLOATING):
        if half_error is None:
            raise ValueError(f"a {dtype} output is judged against the half-precision model's own error")
        return HALF_NOISE_FACTOR * half_error + HALF_NOISE_MARGIN
    if dtype in TOLERANCE:
        return TF32_TOLERANCE if tf32 else TOLERANCE[dtype]
    return 0.0  # integers and booleans: exactly


@dataclass(frozen=True)
class Judgement:
    """One output at one point: the package's error against the reference, and what it was allowed."""

    name: str
    dtype: str
    error: float
    allowed: float
    half_error: float | None  # eager in the half type against the same float32 reference: the noise floor
    half_overflows: bool  # eager in the half type is inf/nan where the float32 reference is finite
    half_dtype: str | None  # the half type of that noise floor (the output's own, or the model's)
    out: np.ndarray = dataclasses.field(repr=False)  # the package's output and the reference, for explain()
    reference: np.ndarray = dataclasses.field(repr=False)

    @property
    def passed(self) -> bool:
        return self.error <= self.allowed

    def record(self) -> dict[str, object]:
        """The manifest's form, rounded to two digits so that packages stay byte-reproducible."""
        entry: dict[str, object] = {"name": self.name, "error": _two_digits(self.error),
                                    "allowed": _two_digits(self.allowed)}
        if self.half_error is not None:
            entry["half_precision_error"] = _two_digits(self.half_error)
        return entry

    def explain(self) -> str:
        """Why it failed, in words: the gap, and whether it is beyond the half type's noise."""
        if self.half_error is None:
            why = f"allowed {self.allowed:.1e}"
        else:
            why = (f"against float32; allowed {self.allowed:.1e} = {HALF_NOISE_FACTOR} x eager {self.half_dtype}'s "
                   f"own {self.half_error:.1e} + {HALF_NOISE_MARGIN:.0e}, so beyond the {self.half_dtype} noise")
        text = f"output {self.name!r}: {mismatch_details(self.out, self.reference)} ({why})"
        if self.half_overflows:
            text += (f"\n    the model itself overflows in {self.half_dtype} here: eager PyTorch in {self.half_dtype} gives "
                     "inf or nan where float32 is finite; export with --dtype bf16 (float32's range) or float32")
        return text


def judge(name: str, dtype: str, out: np.ndarray, reference: np.ndarray, half: np.ndarray | None = None,
          tf32: bool = False, half_dtype: str | None = None) -> Judgement:
    """Judges `out` (a package output of `dtype`, widened) against `reference` (float32 for half outputs);
    `half` is eager PyTorch's output in the half type `half_dtype` (the output's own when not given), required
    for half outputs."""
    half_error, overflow = None, False
    if half is not None:
        overflow = bool(np.any(~np.isfinite(half) & np.isfinite(reference)))
        # Where the half model overflows, its noise floor comes from the elements it kept finite; the package
        # must still be finite everywhere float32 is, or its error is infinite and it fails.
        finite = np.isfinite(half) if overflow else slice(None)
        half_error = relative_error(half[finite], reference[finite])
    error = relative_error(out, reference)
    noise = (half_dtype or dtype) if half is not None else None
    return Judgement(name, dtype, error, allowed_error(dtype, half_error, tf32), half_error, overflow, noise, out,
                     reference)


def _two_digits(value: float) -> float | str:
    return float(f"{value:.1e}") if np.isfinite(value) else "inf"
