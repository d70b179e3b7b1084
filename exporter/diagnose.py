"""Turning a torch.export failure into a CaptureError that names the symbol, the user's line and a fix.

torch's own message for a specialised dynamic dim ("Constraints violated (seq)! ... specialized it to be a
constant (10)") names the symbol but not the line, and its traceback holds no frame of the user's file. So
on such a failure the model is traced again with torch.export.draft_export, which does not stop at the
first problem and records, for each guard it had to add, the user's stack (DraftExportReport.failures).
That report is private API: every use of it is guarded, and without it the message still names the symbol.
Data-dependent branches and ordinary Python errors in forward() do carry the user's frame in the
traceback (export is non-strict: the user's Python really runs), so those need no second trace.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from ..errors import CaptureError
from .dynamic import SymbolSpec
from .frames import UserFiles, UserFrame, innermost_user_frame, is_library_file, library_location, one_line
from .model_file import ModelSpec
from .quiet import quiet_torch

SIZE_HINT = "use torch.cond / tensor ops instead of Python control flow on sizes, or declare a static size"
DATA_HINT = (
    "use torch.where / torch.cond instead of Python control flow on tensor values, and keep .item(), "
    "int(), float() and bool() of tensors out of forward()"
)


@dataclass(frozen=True)
class CaptureContext:
    """What explain() needs to retrace the model and to speak in the user's terms."""

    spec: ModelSpec
    symbols: tuple[SymbolSpec, ...]
    dynamic_shapes: Any
    inputs: tuple[torch.Tensor, ...]  # the (possibly enlarged) inputs export traced with
    files: UserFiles

    def symbol(self, name: str) -> SymbolSpec | None:
        return next((s for s in self.symbols if s.name == name), None)

    def symbol_at(self, arg: str, axis: int) -> str | None:
        return self.spec.dynamic_axes.get(arg, {}).get(axis)


@dataclass(frozen=True)
class DraftFailure:
    kind: str  # FailureType name: GUARD_ADDED, DATA_DEPENDENT_ERROR, ...
    expr: str  # in the user's symbol names where known
    symbols: frozenset[str]  # user symbols the expression involves
    frame: UserFrame | None


def explain(exc: BaseException, ctx: CaptureContext) -> CaptureError:
    if _is_constraint_violation(exc):
        return _explain_specialisation(exc, ctx)
    if _is_data_dependent(exc):
        return _explain_data_dependent(exc, ctx)
    return _explain_other(exc, ctx)


# --- classification ---------------------------------------------------------------------------------


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _torch_class(module: str, name: str) -> type | None:
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except (ImportError, AttributeError):
        return None


def _is_constraint_violation(exc: BaseException) -> bool:
    cls = _torch_class("torch.fx.experimental.symbolic_shapes", "ConstraintViolationError")
    return any(
        (cls is not None and isinstance(e, cls)) or "Constraints violated" in str(e) for e in _chain(exc)
    )


def _is_data_dependent(exc: BaseException) -> bool:
    cls = _torch_class("torch.fx.experimental.symbolic_shapes", "GuardOnDataDependentSymNode")
    return any(
        (cls is not None and isinstance(e, cls)) or "data-dependent expression" in str(e) for e in _chain(exc)
    )


# --- a dynamic dimension specialised by the model ---------------------------------------------------

_CONSTANT = re.compile(
    r"You marked (\w+) as dynamic but your code specialized it to be a constant \((-?\d+)\)"
)
_EQUAL = re.compile(r"The values of (\w+) = .*? and (\w+) = .*? must always be equal")
_GUARD = re.compile(r"Not all values of (\w+) = .*? satisfy the generated guard (.*?)\.?\s*$", re.MULTILINE)
_NAMED = re.compile(r"Constraints violated \(([^)]*)\)")
_FIX_RANGE = re.compile(r"(\w+) = Dim\('\w+',\s*(?:min=(\d+))?,?\s*(?:max=(\d+))?\)")
_FIX_MULTIPLE = re.compile(r"^\s*(\w+) = (\d+)\*(\w+)\s*$", re.MULTILINE)
_SOURCE = re.compile(r"(?:L\[')?(\w+)(?:'\])?\.size\(\)\[(\d+)\]")


def _explain_specialisation(exc: BaseException, ctx: CaptureContext) -> CaptureError:
    text = "\n".join(str(e) for e in _chain(exc))
    named = _NAMED.search(text)
    violated = [s.strip() for s in named.group(1).split(",")] if named else []
    failures = [f for f in draft_failures(ctx) if f.kind == "GUARD_ADDED"]

    def locate(*symbols: str, prefer: str | None = None) -> tuple[UserFrame | None, str | None]:
        relevant = [f for f in failures if set(symbols) & f.symbols]
        if not relevant and not any(f.symbols for f in failures):
            relevant = list(failures)  # sources this torch spells differently: any guard beats none
        # A model adds guards that its range satisfies too (ConvNeXt's `h // 4 > 1` over h = 8..96, beside
        # the `h // 8 > 1` that needs h >= 16): the one that fails somewhere in the range is the one to name.
        holds = {id(f): _holds_over_ranges(f.expr, ctx) for f in relevant}
        relevant = [f for f in relevant if holds[id(f)] is not True] or relevant
        relevant.sort(key=lambda f: (holds[id(f)] is not False, f.frame is None,
                                     prefer is not None and f.expr != prefer))
        if relevant and holds[id(relevant[0])] is True:
            return None, None  # every guard found holds: torch's own guard says more than any of them
        return (relevant[0].frame, relevant[0].expr) if relevant else (None, None)

    error, covered = _specialisation_error(text, ctx, locate) or (None, ())
    if error is None:  # a wording this code does not know: keep torch's own line about it
        sym = ", ".join(violated) or "a dynamic dimension"
        frame, expr = locate(*violated)
        detail = next((ln.strip()[2:] for ln in text.splitlines() if ln.strip().startswith("- ")), "")
        what = f"assumes {expr}" if expr else "specialises it"
        error = f"cannot keep {sym} dynamic: {_at(frame)} {what}" + (f" ({detail})" if detail else "")
        error += f"\nhint: {SIZE_HINT}"
        covered = tuple(violated)
    others = [s for s in violated if s not in covered]
    if others:
        error += f"\n(also specialised: {', '.join(_suggested(text, ctx, s, locate(s)[1]) for s in others)})"
    return CaptureError(error)


def _specialisation_error(text: str, ctx: CaptureContext, locate: Any) -> tuple[str, tuple[str, ...]] | None:
    """The message for the first violation torch reports, and the symbols it covers."""
    if m := _EQUAL.search(text):
        a, b = sorted((m.group(1), m.group(2)))
        frame, _ = locate(a, b)
        return (
            f"symbols {a} and {b} must be equal: {_at(frame)} requires {a} == {b}\n"
            f"hint: bind both axes to the same symbol in dynamic_axes (or make the code not need them equal)"
        ), (a, b)
    if m := _CONSTANT.search(text):
        sym, value = m.group(1), m.group(2)
        frame, _ = locate(sym, prefer=f"{sym} == {value}")
        return (
            f"cannot keep {sym} dynamic{_range(ctx, sym)}: {_at(frame)} makes {sym} a constant ({value}), "
            f"so the graph would only be valid for {sym}={value}\n"
            f"hint: this code makes {sym} a constant; {SIZE_HINT}"
        ), (sym,)
    if m := _GUARD.search(text):
        sym = m.group(1)
        frame, expr = locate(sym)
        condition = expr or _sources_to_symbols(m.group(2), ctx)
        # torch's guard can hold at every size of the range (wav2vec2's `(samples // 20 - 1)**2 > 1` over
        # 400..8000, where what it needs is a multiple of 20): then say it could not be proven, not that it fails
        holds = _holds_over_ranges(condition, ctx)
        verdict = {True: "which torch.export cannot prove for every size in the range",
                   False: "which does not hold over the whole range",
                   None: "which torch.export could not prove over the range"}[holds]
        hint = _range_fix(text, ctx, sym) or _multiple_fix(text, sym) or _narrowed(condition, ctx, sym) or SIZE_HINT
        return (
            f"cannot keep {sym} dynamic{_range(ctx, sym)}: {_at(frame)} assumes {condition}, {verdict}\n"
            f"hint: {hint}"
        ), (sym,)
    return None


# Points of the declared box at which a guard is evaluated: every size of a symbol up to this many, else this
# many spread evenly over its range (both ends included), the product capped by thinning every symbol.
GUARD_POINTS_PER_SYMBOL = 257
GUARD_POINTS_MAX = 20000


# The functions torch prints in guards, as sympy evaluates them on integers: PythonMod is Python's % (the sign of
# the divisor, as sympy.Mod), FloorDiv Python's //.
_FUNCTIONS = {"Max": sympy.Max, "Min": sympy.Min, "Mod": sympy.Mod, "PythonMod": sympy.Mod,
              "FloorDiv": lambda a, b: sympy.floor(a / b)}


# Cached: a failed capture judges each guard draft_export found once per symbol torch names, and again for the
# condition it quotes; the symbols are the declared ranges (frozen), so a guard's verdict is the same each time.
@functools.lru_cache(maxsize=256)
def _guard_test(expr: str, symbols: tuple[SymbolSpec, ...]) -> tuple[list[SymbolSpec], Any] | None:
    """draft_export's guard `expr` (comparisons in the user's symbol names, joined by `|` and `&`, as torch
    prints a guard on either of two sizes) as a Python function of the declared symbols it reads, with those
    symbols; None where sympy cannot read it."""
    specs = [s for s in symbols if re.search(rf"\b{re.escape(s.name)}\b", expr)]
    names = {s.name: sympy.Symbol(s.name, integer=True, positive=True) for s in specs}
    try:
        guard = _relation(expr, {**names, **_FUNCTIONS})
        if guard is None or guard.free_symbols - set(names.values()):
            return None
        return specs, sympy.lambdify([names[s.name] for s in specs], guard, modules=["math"])
    except Exception:  # noqa: BLE001 - a spelling sympy does not read: no judgement
        return None


def _relation(text: str, names: Mapping[str, Any]) -> Any:
    """`text` as a sympy relation: comparisons joined by `or` or `|` (loosest), then `and` or `&`, each maybe
    in parentheses."""
    for joint, combine in ((" or ", sympy.Or), ("|", sympy.Or), (" and ", sympy.And), ("&", sympy.And)):
        parts = _split_outside_parentheses(text, joint)
        if len(parts) > 1:
            relations = [_relation(part, names) for part in parts]
            return None if None in relations else combine(*relations)
    text = text.strip()
    if text.startswith("(") and _closing(text) == len(text) - 1:
        return _relation(text[1:-1], names)
    # split at the comparison: Python's `!=` between sympy expressions compares them as objects, not values
    m = re.fullmatch(r"(.+?)\s*(==|!=|>=|<=|>|<)\s*(.+)", text)
    if not m:
        return None
    left, right = (sympy.sympify(side, locals=names) for side in (m.group(1), m.group(3)))
    return sympy.Rel(left, right, m.group(2))


def _closing(text: str) -> int:
    """Where the parenthesis that opens `text` closes."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return i
    return -1


def _split_outside_parentheses(text: str, joint: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and i >= start and text.startswith(joint, i):
            parts.append(text[start:i])
            start = i + len(joint)
    return [*parts, text[start:]]


def _holds_over_ranges(expr: str, ctx: CaptureContext) -> bool | None:
    """Whether a guard holds at every point of the declared ranges tried; None where it cannot be judged."""
    return _holds_over(expr, ctx.symbols)


@functools.lru_cache(maxsize=256)
def _holds_over(expr: str, symbols: tuple[SymbolSpec, ...]) -> bool | None:
    parsed = _guard_test(expr, symbols)
    if parsed is None:
        return None
    specs, test = parsed
    try:
        return all(bool(test(*point)) for point in itertools.product(*_axes(specs)))
    except Exception:  # noqa: BLE001 - e.g. a division by zero at some size: no judgement
        return None


def _axes(specs: list[SymbolSpec], budget: int = GUARD_POINTS_MAX) -> list[Any]:
    """The sizes of each symbol a guard is evaluated at: all of them up to GUARD_POINTS_PER_SYMBOL, else that
    many spread evenly over the range (both ends included), fewer for every symbol while the product of the
    counts is over `budget`."""
    per = GUARD_POINTS_PER_SYMBOL
    while specs and per > 2 and math.prod(min(per, s.max - s.min + 1) for s in specs) > budget:
        per //= 2
    return [sorted({s.min + (s.max - s.min) * i // (per - 1) for i in range(per)}) if s.max - s.min + 1 > per
            else range(s.min, s.max + 1) for s in specs]


def _range_where_it_holds(expr: str, ctx: CaptureContext, sym: str) -> tuple[int, int] | None:
    """For a guard that fails somewhere in the declared ranges: the longest run of `sym`'s sizes over which
    it holds whatever the other symbols it reads are (within their ranges); None where there is none, or
    where the guard does not read `sym`."""
    parsed = _guard_test(expr, ctx.symbols)
    if parsed is None or sym not in [s.name for s in parsed[0]]:
        return None
    specs, test = parsed
    position = [s.name for s in specs].index(sym)
    spec, others = specs[position], [s for s in specs if s.name != sym]
    if spec.max - spec.min >= GUARD_POINTS_MAX:
        return None
    rest = list(itertools.product(*_axes(others, max(GUARD_POINTS_MAX // (spec.max - spec.min + 1), 1))))

    def holds(size: int) -> bool:
        return all(bool(test(*point[:position], size, *point[position:])) for point in rest)

    best, start = None, None
    try:
        for size in range(spec.min, spec.max + 2):
            if size <= spec.max and holds(size):
                start = size if start is None else start
            elif start is not None:
                if best is None or size - start > best[1] - best[0] + 1:
                    best = (start, size - 1)
                start = None
    except Exception:  # noqa: BLE001 - as in _holds_over
        return None
    return best if best != (spec.min, spec.max) else None


def _at(frame: UserFrame | None) -> str:
    return frame.describe() if frame else "the model's code (aotpack could not find the line)"


def _range(ctx: CaptureContext, name: str) -> str:
    s = ctx.symbol(name)
    return f" over {s.min}..{s.max}" if s else ""


def _torch_range(text: str, ctx: CaptureContext, sym: str) -> tuple[object, object] | None:
    """The narrower Dim torch suggests for `sym` (e.g. `x[:, 2]` needs seq >= 3), its open end the declared one."""
    declared = ctx.symbol(sym)
    for m in _FIX_RANGE.finditer(text):
        if m.group(1) == sym and (m.group(2) or m.group(3)):
            return (m.group(2) or (declared.min if declared else "MIN"),
                    m.group(3) or (declared.max if declared else "MAX"))
    return None


def _range_fix(text: str, ctx: CaptureContext, sym: str) -> str | None:
    suggested = _torch_range(text, ctx, sym)
    if suggested is None:
        return None
    lo, hi = suggested
    return f"if {sym} really is limited to that, declare --dynamic {sym}={lo}..{hi}; otherwise {SIZE_HINT}"


def _narrowed(condition: str, ctx: CaptureContext, sym: str) -> str | None:
    """The range fix torch did not suggest, where the guard holds over a run of `sym`'s range (whatever the
    other symbols it reads are), or else of another symbol's that it reads."""
    parsed = _guard_test(condition, ctx.symbols)
    names = [s.name for s in parsed[0]] if parsed else [sym]
    for name in [sym, *(n for n in names if n != sym)]:
        run = _range_where_it_holds(condition, ctx, name)
        if run is not None and run[0] == run[1]:  # XLNet: one size only, which no range keeps dynamic
            return f"{condition} holds for {name} = {run[0]} only: the model as written supports that one size; " \
                   f"declare it static (--dynamic {name}={run[0]}..{run[0]}), or use torch.cond / tensor ops " \
                   "instead of Python control flow on sizes"
        if run is not None:
            return f"{condition} holds for {name} in {run[0]}..{run[1]}: if {name} really is limited to that, " \
                   f"declare --dynamic {name}={run[0]}..{run[1]}; otherwise {SIZE_HINT}"
    return None


def _suggested(text: str, ctx: CaptureContext, sym: str, guard: str | None) -> str:
    """Another specialised symbol, with the range that keeps it where one is found: torch's suggestion, else
    the run of its range over which its own guard holds (HF ResNet's h needs the same 33..96 as its w)."""
    suggested = _torch_range(text, ctx, sym)
    if suggested is not None:
        return f"{sym} (--dynamic {sym}={suggested[0]}..{suggested[1]} keeps it)"
    run = _range_where_it_holds(guard, ctx, sym) if guard else None
    return f"{sym} (its guard {guard} holds for {sym} in {run[0]}..{run[1]})" if run else sym


def _multiple_fix(text: str, sym: str) -> str | None:
    """torch suggests a derived dim when the code needs a multiple (`samples = 20*_samples`), which a range
    cannot declare."""
    for m in _FIX_MULTIPLE.finditer(text):
        if m.group(1) == sym:
            factor, inner = m.group(2), m.group(3)
            bounds = re.search(rf"{re.escape(inner)} = Dim\('\w+',\s*min=(\d+),\s*max=(\d+)\)", text)
            within = f", {inner} in {bounds.group(1)}..{bounds.group(2)}" if bounds else ""
            return (
                f"the model needs {sym} to be a multiple of {factor} (torch suggests {sym} = {factor} * {inner}"
                f"{within}), which a range cannot declare: pad {sym} to a multiple of {factor} inside forward() so "
                f"that any size works, or declare a static size"
            )
    return None


def _sources_to_symbols(expr: str, ctx: CaptureContext) -> str:
    """`L['x'].size()[1] != 16` -> `seq != 16`."""
    return _SOURCE.sub(lambda m: ctx.symbol_at(m.group(1), int(m.group(2))) or m.group(0), expr)


# --- control flow on tensor values ------------------------------------------------------------------


def _explain_data_dependent(exc: BaseException, ctx: CaptureContext) -> CaptureError:
    frame = innermost_user_frame(exc, ctx.files)
    if frame is None:
        found = [f for f in draft_failures(ctx) if f.kind == "DATA_DEPENDENT_ERROR" and f.frame]
        frame = found[0].frame if found else None
    text = str(exc)
    if "specialized integer" in text or "specialized float" in text:
        what = "turns a tensor value into a Python number (.item() / int() / float())"
    else:
        what = "branches on the values in a tensor (data-dependent control flow)"
    # The branch can be inside a library the model calls (transformers' EnCodec pads by values in a buffer):
    # say where, beside the user's line that led there.
    inside = library_location(exc, ctx.files)
    return CaptureError(
        f"cannot capture {_at(frame)}: it {what}, but one graph must serve every input"
        + (f"\n  at {inside}" if inside else "") + f"\nhint: {DATA_HINT}"
    )


# --- anything else: the user's own error, or Python torch.export cannot trace -----------------------


def _explain_other(exc: BaseException, ctx: CaptureContext) -> CaptureError:
    # Run forward() eagerly: if it fails there too, it is a plain bug in the model (or its example inputs),
    # and the eager error speaks in concrete sizes rather than torch's symbols (3*s27).
    eager = _eager_error(ctx)
    if eager is not None:
        frame = innermost_user_frame(eager, ctx.files) or innermost_user_frame(exc, ctx.files)
        where = f"{frame.describe()}: " if frame else ""
        # Raised inside a library (a Hugging Face model): say where, or the message names no line at all.
        inside = None if frame else library_location(eager)
        return CaptureError(
            f"{where}forward() raised {type(eager).__name__} on the example inputs: {one_line(str(eager))}"
            + (f"\n  raised at {inside}" if inside else "")
        )
    frame = innermost_user_frame(exc, ctx.files)
    where = f" {frame.describe()}" if frame else " the model"
    return CaptureError(f"torch.export cannot capture{where}: {type(exc).__name__}: {one_line(str(exc))}")


def _eager_error(ctx: CaptureContext) -> Exception | None:
    try:
        with torch.no_grad(), quiet_torch():
            ctx.spec.model(*ctx.inputs)
    except Exception as e:  # noqa: BLE001 - any error the user's forward() raises is the answer
        return e
    return None


# --- draft_export's report (private API, guarded) ---------------------------------------------------


def draft_failures(ctx: CaptureContext) -> list[DraftFailure]:
    """The failures draft_export records for this model, or [] wherever that API is missing or differs."""
    draft = getattr(torch.export, "draft_export", None)
    if draft is None:
        return []
    try:
        with torch.no_grad(), quiet_torch():
            program = draft(ctx.spec.model, ctx.inputs, dynamic_shapes=ctx.dynamic_shapes)
        report = program._report
        names = _filename_table(report)
        return [_failure(f, names, ctx) for f in report.failures]
    except Exception:  # noqa: BLE001 - private API of another torch version: fall back to the plain message
        return []


def _filename_table(report: Any) -> Mapping[int, str]:
    # Frames name files by index into torch's process-wide intern table. The report's own table holds only
    # the files first interned during the draft run, not those the failed export before it interned, so
    # the global table is the main source and the report's fills in.
    table: dict[int, str] = {}
    try:
        from torch._logging.structured import INTERN_TABLE  # path -> index

        table.update({index: path for path, index in INTERN_TABLE.items()})
    except (ImportError, AttributeError):
        pass
    extra = getattr(report, "str_to_filename", None)
    if isinstance(extra, Mapping):
        table.update(extra)
    return table


def _failure(failure: Any, names: Mapping[int, str], ctx: CaptureContext) -> DraftFailure:
    kind = getattr(failure.failure_type, "name", str(failure.failure_type))
    data = failure.data if isinstance(failure.data, Mapping) else {}
    rename = {}
    for torch_sym, source in (data.get("symbol_to_sources") or {}).items():
        m = _SOURCE.search(str(source))
        user = ctx.symbol_at(m.group(1), int(m.group(2))) if m else None
        if user:
            rename[str(torch_sym)] = user
    expr = _readable(str(data.get("expr", "")), rename)
    frame = library = None
    for entry in reversed(list(data.get("user_stack") or [])):
        filename = entry.get("filename")
        filename = names.get(filename) if isinstance(filename, int) else filename
        line = entry.get("line")
        if not isinstance(filename, str) or not isinstance(line, int):
            continue
        if filename in ctx.files:
            frame = ctx.files.frame(filename, line, entry.get("loc"))
            break
        if library is None and is_library_file(filename):
            library = ctx.files.frame(filename, line, entry.get("loc"))
    # torch keeps the last frames of a stack only: a guard added deep inside transformers (Swin's window
    # padding, HuBERT's feature extractor) may keep no frame of the user's files, but its library line says
    # where it comes from better than no line at all.
    return DraftFailure(kind, expr, frozenset(rename.values()), frame or library)


def _readable(expr: str, rename: Mapping[str, str]) -> str:
    """`Eq(s27, 10)` -> `seq == 10`, in the user's symbol names."""
    for torch_sym, user in rename.items():
        expr = re.sub(rf"\b{re.escape(torch_sym)}\b", user, expr)
    m = re.fullmatch(r"(Eq|Ne)\((.+), (.+)\)", expr)
    if m:
        return f"{m.group(2)} {'==' if m.group(1) == 'Eq' else '!='} {m.group(3)}"
    return expr
