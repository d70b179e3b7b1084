"""Operator coverage against PyTorch's OpInfo database (torch.testing._internal...op_db).

Every OpInfo entry's sample inputs (float32, plus the integer and boolean dtypes the op supports) become ONE
model per op whose outputs are every sample's outputs. It goes through aotpack's real pipeline (capture with
our decompositions, lowering, C++ compile, package) and the C++ runtime, and each sample is compared with eager:
floats by relative norm error (or torch.testing's allclose where sizes are tiny), integers and booleans exactly,
NaN where eager gives NaN. A failing op is retried sample by sample so each failure has its own reason.

    .venv/bin/python -m bench.coverage [--ops add,mul] [--jobs 2] [--out docs/coverage.md]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from aotpack.errors import CaptureError, UnsupportedError
from torch.utils._python_dispatch import TorchDispatchMode

DTYPES = (torch.float32, torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool)
SUPPORTED_DTYPES = DTYPES + (torch.float64, torch.float16, torch.bfloat16, torch.int16)
# Samples taken per op and dtype (the first ones: OpInfo lists the common cases first).
MAX_SAMPLES = {torch.float32: 12}
MAX_SAMPLES_OTHER = 4
REL_TOL = 1e-5
ALLCLOSE = {"rtol": 1.3e-6, "atol": 1e-5}  # torch.testing's float32 defaults, for tiny outputs
TINY = 16  # elements
OP_TIMEOUT_S = 300
HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent


@dataclass
class Sample:
    label: str  # "float32 #3"
    dtype: torch.dtype
    tensors: list[torch.Tensor]  # the model inputs
    rebuild: Callable[[Sequence[torch.Tensor]], tuple[Any, tuple, dict]]  # tensors -> (input, args, kwargs)


@dataclass
class OpResult:
    name: str
    passed: int = 0
    total: int = 0  # applicable samples
    exported: set[str] = field(default_factory=set)  # samples that captured and decomposed to core ATen
    not_applicable: Counter = field(default_factory=Counter)  # reason -> samples
    failures: dict[str, str] = field(default_factory=dict)  # sample label -> reason
    seconds: float = 0.0

    @property
    def decomposes(self) -> bool:
        return bool(self.exported)

    @property
    def ok(self) -> bool:
        """Every sample that decomposes to core ATen passes (the others are torch.export's limits, listed)."""
        return self.decomposes and self.passed == len(self.exported)


def op_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


# ---- samples -------------------------------------------------------------------------------------------


def _not_applicable(leaves: list[Any]) -> str | None:
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if leaf.layout != torch.strided:
                return f"{leaf.layout} input"
            if leaf.is_quantized or leaf.is_complex():
                return "complex or quantized input"
            if leaf.dtype not in SUPPORTED_DTYPES:
                return f"{leaf.dtype} input"
            if leaf.requires_grad:
                return "needs requires_grad"
        elif isinstance(leaf, torch.Generator):
            return "takes a random generator"
        elif isinstance(leaf, (torch.device, str)) and str(leaf).startswith(("cuda", "meta", "xpu", "mps")):
            return "targets another device"
        elif isinstance(leaf, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
            pass
        elif isinstance(leaf, complex):
            return "complex scalar argument"
        elif not isinstance(leaf, (bool, int, float, str, type(None), slice, type(Ellipsis))):
            return f"{type(leaf).__name__} argument"
    return None


def samples_of(op: Any, limits: tuple[int, int] | None = None) -> tuple[list[Sample], Counter]:
    """The op's applicable samples in every dtype we try, and how many were skipped for which reason."""
    samples, skipped = [], Counter()
    supported = op.supported_dtypes("cpu")
    for dtype in DTYPES:
        if dtype not in supported:
            continue
        torch.manual_seed(0)
        try:
            inputs = list(op.sample_inputs("cpu", dtype, requires_grad=False))
        except Exception as e:  # noqa: BLE001 - OpInfo's own generator failing is not aotpack's business
            skipped[f"sample generation failed: {type(e).__name__}"] += 1
            continue
        taken = 0
        for i, s in enumerate(inputs):
            float_limit, other_limit = limits or (MAX_SAMPLES[torch.float32], MAX_SAMPLES_OTHER)
            if taken >= (float_limit if dtype == torch.float32 else other_limit):
                break
            leaves, spec = pytree.tree_flatten((s.input, tuple(s.args), dict(s.kwargs)))
            reason = _not_applicable(leaves)
            if reason:
                skipped[reason] += 1
                continue
            positions = [k for k, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
            if not positions:
                skipped["no tensor input"] += 1
                continue

            def rebuild(tensors: Sequence[torch.Tensor], leaves=leaves, spec=spec, positions=positions) -> Any:
                filled = list(leaves)
                for k, t in zip(positions, tensors):
                    filled[k] = t
                return pytree.tree_unflatten(filled, spec)

            tensors = [leaves[k].detach().clone().contiguous() for k in positions]
            samples.append(Sample(f"{str(dtype).removeprefix('torch.')} #{i}", dtype, tensors, rebuild))
            taken += 1
    return samples, skipped


def _outputs(result: Any) -> list[Any]:
    return pytree.tree_leaves(result)


class _SeededOps(TorchDispatchMode):
    """Notes any ATen op tagged nondeterministic_seeded (rand, bernoulli, dropout...) that eager runs."""

    seen: Any = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.seen = func
        return func(*args, **(kwargs or {}))


def eager_check(op: Any, sample: Sample) -> str | None:
    """Why a sample cannot be compared with eager (it raises, returns non-tensors, or is random), or None."""
    def run() -> list[Any]:
        x, args, kwargs = sample.rebuild([t.clone() for t in sample.tensors])
        return _outputs(op.op(x, *args, **kwargs))

    try:
        with torch.no_grad(), _SeededOps() as seeded:
            first, second = run(), run()
    except Exception as e:  # noqa: BLE001
        return f"eager raises {type(e).__name__}"
    if seeded.seen:
        return f"random ({seeded.seen})"
    if not first:
        return "returns no tensor"
    for a, b in zip(first, second):
        if not isinstance(a, torch.Tensor):
            return f"returns a {type(a).__name__}"
        if a.is_complex() or a.dtype not in SUPPORTED_DTYPES or a.layout != torch.strided:
            return f"returns {a.dtype} {a.layout}"
        if not torch.equal(a, b) and not (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                          and torch.equal(a.nan_to_num(), b.nan_to_num())):
            return "random (eager differs between runs)"
    return None


class OneOp(torch.nn.Module):
    """All samples of one op as one model: inputs are every sample's tensors, outputs every sample's outputs."""

    def __init__(self, fn: Callable, samples: Sequence[Sample]) -> None:
        super().__init__()
        self.fn = fn
        self.samples = list(samples)

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor] = []
        start = 0
        for s in self.samples:
            x, args, kwargs = s.rebuild(tensors[start:start + len(s.tensors)])
            start += len(s.tensors)
            outs += _outputs(self.fn(x, *args, **kwargs))
        return tuple(outs)


# ---- the pipeline ---------------------------------------------------------------------------------------


def _spec(module: OneOp) -> Any:
    from aotpack.exporter import ModelSpec

    inputs = tuple(t for s in module.samples for t in s.tensors)
    return ModelSpec(HERE, module, inputs, tuple(f"x{i}" for i in range(len(inputs))), {}, {})


class NotCoreATen(Exception):
    """The decomposed graph still has ops outside core ATen that aotpack has no lowering for."""


def capture_samples(fn: Callable, samples: Sequence[Sample]) -> Any:
    """Captured and decomposed; raises NotCoreATen when what is left is not core ATen (linalg, fft, special)."""
    from aotpack.exporter import capture
    from aotpack.lowering.frontend import ops  # noqa: F401  (registers the lowerings)
    from aotpack.lowering.frontend.decompositions import decompositions
    from aotpack.lowering.frontend.graph import _IGNORED as IGNORED_NODES
    from aotpack.lowering.frontend.registry import lowering_for

    captured = capture(_spec(OneOp(fn, samples)), (), None, decompositions())
    left = {str(n.target) for n in captured.program.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and torch.Tag.core not in n.target.tags and lowering_for(n.target) is None
            and n.target.namespace == "aten" and str(n.target) not in IGNORED_NODES}
    if left:
        raise NotCoreATen(", ".join(sorted(left)))
    return captured


def lower_only(captured: Any) -> None:
    from aotpack.lowering.frontend import ops  # noqa: F401  (registers the lowerings)
    from aotpack.lowering.frontend.graph import GraphLowering

    GraphLowering(captured).run()


def compare(out: np.ndarray, ref: torch.Tensor) -> str | None:
    """None when the runtime's output matches eager's, else what differs."""
    from aotpack.verification import from_runtime, mismatch_report, relative_error, to_numpy

    ref_np = ref.float().numpy() if ref.dtype in (torch.bfloat16, torch.float16) else to_numpy(ref)
    out = from_runtime(out, ref.dtype)
    if out.shape != ref_np.shape:
        return f"wrong shape {out.shape}, expected {ref_np.shape}"
    if ref.is_floating_point():
        if relative_error(out, ref_np) <= REL_TOL:
            return None
        if ref_np.size <= TINY and np.allclose(out, ref_np, equal_nan=True, **ALLCLOSE):
            return None
    elif np.array_equal(out, ref_np):
        return None
    if out.dtype != ref_np.dtype:
        return f"wrong dtype {out.dtype}, expected {ref_np.dtype}"
    return "numerical mismatch: " + mismatch_report("output", out, ref_np)


def run_samples(fn: Callable, samples: Sequence[Sample], captured: Any, workdir: Path) -> dict[str, str | None]:
    """Builds one package for all samples, runs it, and returns each sample's failure (None: passed)."""
    from aotpack import runtime
    from aotpack.build import build_package
    from aotpack.verification import to_numpy

    result = build_package(captured, workdir / "op.aotpack")
    inputs = [t for s in samples for t in s.tensors]
    outputs = runtime.Model(result.path).session(num_threads=1).run([to_numpy(t) for t in inputs])
    eager = OneOp(fn, samples)
    with torch.no_grad():  # the reference is the op itself, not the captured graph
        reference = list(eager(*[t.clone() for t in inputs]))
    assert len(reference) == len(outputs)
    verdicts, start = {}, 0
    for s in samples:
        x, args, kwargs = s.rebuild(s.tensors)
        with torch.no_grad():
            count = len(_outputs(fn(x, *args, **kwargs)))
        problems = [compare(o, r) for o, r in zip(outputs[start:start + count], reference[start:start + count])]
        verdicts[s.label] = next((p for p in problems if p), None)
        start += count
    return verdicts


# Where the harness's own model calls the op: noise in every message.
_SOURCE = re.compile(r"( at)? ?\S*bench/coverage\.py:\d+ \(outs \+= .*?kwargs\)\)\)(: )?")


def reason_of(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if isinstance(e, UnsupportedError):
        ops = re.findall(r"(\S+): used at", text)
        if "cannot lower" in text and ops:
            return "unsupported op: " + ", ".join(sorted(set(ops)))
        return "unsupported: " + _SOURCE.sub("", text)[:300]
    if isinstance(e, NotCoreATen):
        return f"not core ATen: {e}"
    if isinstance(e, CaptureError):
        return "export failure: " + _SOURCE.sub("", text)[:300]
    from aotpack.runtime import AotpackError as RuntimeFailure

    if isinstance(e, RuntimeFailure):
        return "runtime error: " + text[:300]
    return f"lowering error: {type(e).__name__}: {text[:300]}"


def check_op(op: Any, limits: tuple[int, int] | None = None) -> OpResult:
    """Every applicable sample of `op` (at most `limits` = (float32, other dtypes) per dtype) through the
    pipeline: one package, split up only when something fails."""
    start = time.perf_counter()
    result = OpResult(op_name(op))
    samples, result.not_applicable = samples_of(op, limits)
    if "empty" in op.name:  # empty, empty_like, new_empty_strided...: the values are whatever memory held
        result.not_applicable["output values unspecified (uninitialized memory)"] += len(samples)
        samples = []
    good = []
    for s in samples:
        why = eager_check(op, s)
        if why:
            result.not_applicable[why] += 1
        else:
            good.append(s)
    result.total = len(good)
    with tempfile.TemporaryDirectory(prefix="aotpack-coverage-") as tmp:
        verdicts = _check_group(op.op, good, Path(tmp), result)
    result.passed = sum(1 for v in verdicts.values() if v is None)
    result.failures = {k: v for k, v in verdicts.items() if v is not None}
    result.seconds = time.perf_counter() - start
    return result


def _check_group(fn: Callable, samples: list[Sample], workdir: Path, result: OpResult) -> dict[str, str | None]:
    """One package for all samples; on failure, bisect: capture and lowering alone find the samples that
    cannot be lowered (cheap), the rest are built together, and only a failing build is split further."""
    if not samples:
        return {}
    try:
        captured = capture_samples(fn, samples)
        lower_only(captured)
    except Exception as e:  # noqa: BLE001
        if len(samples) == 1:
            return {samples[0].label: reason_of(e)}
        verdicts: dict[str, str | None] = {}
        lowerable = _lowerable(fn, samples[: len(samples) // 2], verdicts, result) + \
            _lowerable(fn, samples[len(samples) // 2:], verdicts, result)
        return verdicts | _build_group(fn, lowerable, workdir, result)
    result.exported.update(s.label for s in samples)
    return _build_group(fn, samples, workdir, result, captured)


def _lowerable(fn: Callable, samples: list[Sample], verdicts: dict[str, str | None], result: OpResult) -> list[Sample]:
    """The samples that capture and lower, by bisection; the others get their reason in `verdicts`."""
    if not samples:
        return []
    try:
        captured = capture_samples(fn, samples)
    except Exception as e:  # noqa: BLE001
        if len(samples) == 1:
            verdicts[samples[0].label] = reason_of(e)
            return []
        return _lowerable(fn, samples[: len(samples) // 2], verdicts, result) + \
            _lowerable(fn, samples[len(samples) // 2:], verdicts, result)
    result.exported.update(s.label for s in samples)
    try:
        lower_only(captured)
        return samples
    except Exception as e:  # noqa: BLE001
        if len(samples) == 1:
            verdicts[samples[0].label] = reason_of(e)
            return []
        return _lowerable(fn, samples[: len(samples) // 2], verdicts, result) + \
            _lowerable(fn, samples[len(samples) // 2:], verdicts, result)


def _build_group(fn: Callable, samples: list[Sample], workdir: Path, result: OpResult,
                 captured: Any = None) -> dict[str, str | None]:
    """Samples that lower: built and run as one package, halved while the build or the run fails."""
    if not samples:
        return {}
    try:
        return run_samples(fn, samples, captured or capture_samples(fn, samples), workdir)
    except Exception as e:  # noqa: BLE001
        if len(samples) == 1:
            return {samples[0].label: reason_of(e)}
        return _build_group(fn, samples[: len(samples) // 2], workdir, result) | \
            _build_group(fn, samples[len(samples) // 2:], workdir, result)


# ---- running over op_db ---------------------------------------------------------------------------------


def op_db() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db as db

    return [op for op in db if torch.float32 in op.supported_dtypes("cpu")]


def _worker(conn: Any) -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # deprecation notices from OpInfo's own functions
    ops = {op_name(op): op for op in op_db()}
    while True:
        name = conn.recv()
        if name is None:
            return
        try:
            conn.send(check_op(ops[name]))
        except Exception as e:  # noqa: BLE001
            conn.send(OpResult(name, failures={"all": f"harness error: {type(e).__name__}: {e}"}))


def run_all(names: list[str], jobs: int, progress: Callable[[OpResult], None]) -> list[OpResult]:
    """Each op in a worker process of a pool of `jobs`; a crash or a hang costs that op only."""
    ctx = multiprocessing.get_context("spawn")
    pending, results = list(names), []
    workers: list[list[Any]] = []  # [process, connection, op name or None, started]

    def start() -> list[Any]:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        proc.start()
        return [proc, parent, None, 0.0]

    workers = [start() for _ in range(min(jobs, len(names)))]
    while pending or any(w[2] for w in workers):
        for i, w in enumerate(workers):
            proc, conn, name, began = w
            if name is None and pending:
                w[2], w[3] = pending.pop(0), time.perf_counter()
                conn.send(w[2])
                continue
            if name is None:
                continue
            if conn.poll(0.05):
                try:
                    results.append(conn.recv())
                except EOFError:
                    results.append(OpResult(name, failures={"all": "crash: the worker process died"}))
                    workers[i] = start()
                    continue
                progress(results[-1])
                w[2] = None
            elif not proc.is_alive() or time.perf_counter() - began > OP_TIMEOUT_S:
                why = "crash: the worker process died" if not proc.is_alive() else f"timeout after {OP_TIMEOUT_S} s"
                proc.kill()
                results.append(OpResult(name, failures={"all": why}))
                progress(results[-1])
                workers[i] = start()
    for proc, conn, _, _ in workers:
        conn.send(None)
        proc.join(5)
    return results


def report(results: list[OpResult], seconds: float) -> str:
    results = sorted(results, key=lambda r: r.name)
    tried = [r for r in results if r.total > 0]
    decomposing = [r for r in tried if r.decomposes]
    passing = [r for r in decomposing if r.ok]
    pct = 100.0 * len(passing) / max(len(decomposing), 1)
    reasons = Counter(_kind(v) for r in tried for v in set(r.failures.values()))
    lines = [
        "# Operator coverage against PyTorch's OpInfo database",
        "",
        (f"Generated by `make coverage` (`python -m bench.coverage`) with torch {torch.__version__} in "
        f"{seconds / 60:.0f} min. Each OpInfo entry's sample inputs in "
        f"{', '.join(str(d).removeprefix('torch.') for d in DTYPES)} (those the op supports; at most "
        f"{MAX_SAMPLES[torch.float32]} float32 and {MAX_SAMPLES_OTHER} other samples per dtype) become one model, "
        "exported through aotpack and run by the C++ runtime, compared with eager: float relative norm error "
        f"≤ {REL_TOL:g} (or allclose at {ALLCLOSE} for outputs of at most {TINY} elements), integers and booleans "
        "exactly, NaN where eager has NaN. A sample *decomposes to core ATen* when torch.export captures it and, "
        "after torch's and aotpack's decompositions, every op left is core ATen or one aotpack lowers; an op "
        "*passes* when every such sample matches eager (samples that do not decompose are listed, not counted)."),
        "",
        "| | ops |",
        "| --- | --- |",
        f"| OpInfo entries (with float32 support) | {len(results)} |",
        f"| tried (at least one applicable sample) | {len(tried)} |",
        f"| export decomposes to core ATen (torch.export + aotpack's decompositions) | {len(decomposing)} |",
        f"| **pass every decomposing sample** | **{len(passing)} ({pct:.1f}% of those decomposing)** |",
        "",
        "Failures by kind (distinct reasons): " + ", ".join(f"{k} {n}" for k, n in reasons.most_common()) + ".",
        "",
        "Not applicable (skipped samples): " + ", ".join(
            f"{k} {n}" for k, n in sum((r.not_applicable for r in results), Counter()).most_common(12)) + ".",
        "",
        "| op | passed / samples decomposing to core ATen (of all) | failures |",
        "| --- | --- | --- |",
    ]
    for r in results:
        if r.total == 0:
            why = "; ".join(f"{k} ({n})" for k, n in r.not_applicable.most_common(2)) or "no samples"
            lines.append(f"| {r.name} | n/a | not applicable: {_cell(why)} |")
            continue
        grouped: dict[str, list[str]] = {}
        for label, reason in r.failures.items():
            grouped.setdefault(reason, []).append(label)
        cell = "<br>".join(f"{', '.join(labels[:3])}{' …' if len(labels) > 3 else ''}: {_cell(reason)}"
                           for reason, labels in grouped.items())
        lines.append(f"| {r.name} | {r.passed} / {len(r.exported)}{f' (of {r.total})' if r.total > len(r.exported) else ''} "
                     f"| {cell} |")
    return "\n".join(lines) + "\n"


def _kind(reason: str) -> str:
    return reason.split(":")[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:240]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--out", default=str(ROOT / "docs" / "coverage.md"))
    args = parser.parse_args(argv)
    names = [op_name(op) for op in op_db()]
    if args.ops:
        wanted = set(args.ops.split(","))
        names = [n for n in names if n in wanted or n.split(".")[0] in wanted]
    start = time.perf_counter()

    def progress(r: OpResult) -> None:
        status = "ok" if r.ok else ("n/a" if not r.total else "FAIL")
        first = next(iter(r.failures.values()), "")
        print(f"{r.name:32} {status:4} {r.passed}/{r.total} {r.seconds:5.1f}s {first[:150]}", flush=True)

    results = run_all(names, args.jobs, progress)
    text = report(results, time.perf_counter() - start)
    Path(args.out).write_text(text)
    print("\n".join(text.splitlines()[4:12]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
