"""Tuning at export: each large kernel's candidate configurations timed on the local GPU, the fastest kept.

The program is rendered twice. The first pass renders every matrix product and attention step per bucket of
its deciding size (codegen/library.py) at the table's configuration (matmul_config.py, attention_config.py)
and, where the bucket's work is large enough for the configuration to matter, at each candidate
configuration too. The candidates are compiled exactly as the package's kernels are (compile.py), launched
through Triton's launcher on buffers of random values at the bucket's representative sizes (its top and its
middle) and timed with triton.testing.do_bench (cold L2, median). Each candidate's output is compared with the
table's configuration's on the same buffers first: one that differs (a miscompiled or wrong kernel) is not
chosen and is reported, so a wrong candidate costs its speed, never the export. The second pass renders each
step and bucket at the configuration with the least time summed over those sizes.

Times are cached by GPU, Triton version, kernel (its name hashes its source and configuration) and sizes,
in the cache folder's tuning/ (AOTPACK_CACHE_DIR): exporting the same model again times nothing and chooses
the same configurations. Triton's own autotuner is not used because it tunes a JIT kernel at its first call,
for the call's sizes; a package's kernels are compiled before any call, one per bucket of a declared range.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sympy

from .... import knobs, progress
from ...codegen.library import RenderedLibrary
from ...ir.dtypes import DTYPES, is_float
from ...ir.kernels import AttentionKernel, Kernel, MatmulKernel, Program
from ...ir.symbolic import evaluate
from ..cache_file import write_cache_file
from .attention_config import AttentionConfig
from .compile import shared_memory_limit
from .matmul_config import MatmulConfig
from .render import TritonKernel, TritonRenderer

# A bucket is tuned when its kernel's work at the bucket's top would take at least this long at the peak
# rates below (an H100/H200-class GPU): below it a kernel's time is its launch and first loads, which no
# configuration changes, and tuning would only cost export time (tiny test models tune nothing). Few-row
# products of a few MB of weights are above it: their K loop's latency, which the K step changes, makes
# them 2-5 x their estimate (GPT-2's MLP down at one row: 1.6 us estimated, 7.1-9.2 us measured).
MIN_MICROSECONDS = 1.0
PEAK_FLOPS = 400e12  # dense half-precision tensor-core FLOP/s
PEAK_BYTES = 3e12  # memory bytes/s

Config = MatmulConfig | AttentionConfig
# How timed buffers are filled (Timer._buffer) and what a time vouches for (its output checked against the
# table's, since session 30), in the cache's keys: times of other fills, or unchecked ones, are stale.
INPUTS = "mask-ones,checked"
# A candidate's output differs from the table's when their largest difference exceeds this fraction of the
# table's largest magnitude: far above two summation orders' rounding (bf16: 2^-8 of an element at most),
# far below what a wrong tile, mask or index gives (of the order of the values themselves).
MISMATCH = 2e-2


@dataclass
class Job:
    """One step's bucket to tune: its candidates rendered (the table's first) and the sizes to time them at."""

    kernel: Kernel
    args: tuple[str, ...]  # the buffers the step takes: its reads, then its output
    candidates: list[tuple[Config, TritonKernel, tuple[sympy.Expr, ...]]]  # (config, kernel, grid)
    sizes: list[dict[sympy.Symbol, int]]  # symbol values at which to time them


@dataclass
class Tuning:
    """Both passes' state: `visit` records jobs while collecting, then returns each one's choice."""

    collecting: bool = True
    jobs: dict[tuple[str, tuple[int, int]], Job] = field(default_factory=dict)
    chosen: dict[tuple[str, tuple[int, int]], Config] = field(default_factory=dict)

    def visit(self, renderer: TritonRenderer, kernel: Kernel, rendered: TritonKernel) -> Config | None:
        """Called for every render at the table's configuration; the configuration to render instead."""
        bucket = renderer.bucket(kernel)
        if bucket is None:
            return None
        key = (rendered.name, bucket)
        if not self.collecting:
            return self.chosen.get(key)
        if key in self.jobs:
            return None
        candidates = renderer.candidates(kernel)
        if len(candidates) < 2 or estimated_microseconds(renderer, kernel) < MIN_MICROSECONDS:
            return None
        rendered_candidates = [(c, *renderer.render_with(kernel, c)) for c in candidates]
        size = sympy.sympify(renderer.deciding_size(kernel))
        lo, hi = bucket
        targets = sorted({hi, (lo + hi) // 2}, reverse=True)
        sizes = [symbol_values(size, t, renderer.ranges) for t in targets]
        self.jobs[key] = Job(kernel, tuple(renderer.args(kernel)), rendered_candidates, sizes)
        return None


def estimated_microseconds(renderer: TritonRenderer, kernel: Kernel) -> float:
    """A roofline estimate of the kernel's time at its bucket's largest sizes."""
    if isinstance(kernel, MatmulKernel):
        size = DTYPES[renderer.operand_dtype(kernel.a)].itemsize
        b, m, n, k = (renderer.max(e) for e in (kernel.batch, kernel.m, kernel.n, kernel.k))
        flops, moved = 2 * b * m * n * k, size * b * (m * k + k * n + m * n)
    elif isinstance(kernel, AttentionKernel):
        b, h, q, kv = (renderer.max(e) for e in (kernel.batch, kernel.heads, kernel.q_len, kernel.kv_len))
        d, dv, size = int(kernel.head_dim), int(kernel.value_dim), DTYPES[kernel.dtype].itemsize
        flops = 2 * b * h * q * kv * (d + dv) * (0.5 if kernel.causal else 1.0)
        moved = size * b * h * (q * d + kv * (d + dv) + q * dv)
    else:
        return 0.0
    return max(flops / PEAK_FLOPS, moved / PEAK_BYTES) * 1e6


def symbol_values(size: sympy.Expr, target: int, ranges: dict[sympy.Symbol, tuple[int, int]]) -> dict[sympy.Symbol, int]:
    """Symbol values at which `size` is as large as it can be without exceeding `target`: every symbol at
    its maximum, then those of `size`, widest range first, lowered (by bisection, as the size grows with
    each) until it fits. batch * seq at 1280 with batch 1..8 and seq 1..2048: batch 8, seq 160."""
    values = {s: hi for s, (_, hi) in ranges.items()}
    for symbol in sorted(size.free_symbols & set(ranges), key=lambda s: (ranges[s][0] - ranges[s][1], s.name)):
        if evaluate(size, values) <= target:
            break
        lo, hi = ranges[symbol]
        while lo < hi:
            values[symbol] = mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if evaluate(size, values) <= target else (lo, mid - 1)
        values[symbol] = lo
    return values


def tuned_library(program: Program, archs: tuple[int, ...],
                  render: Callable[[Tuning | None], RenderedLibrary]) -> RenderedLibrary:
    """The library rendered at the tables' configurations, its tunable buckets timed on this machine's GPU (of
    the newest of `archs`), and the library rendered again with the fastest that every one of `archs` can
    load (a candidate may need more shared memory than an older target gives a block)."""
    arch = max(archs) if archs else None
    tuning = Tuning()
    first = render(tuning)
    if not tuning.jobs:
        return first
    report = progress.current()
    with report.stage("tune", f"{len(tuning.jobs)} kernel buckets on the local GPU"):
        start = time.perf_counter()
        timer = Timer(program, first.prelude, arch, shared_memory_limit(archs))
        timer.compile(list(tuning.jobs.values()))
        with _timing_lock():
            times = {key: timer.times(job) for key, job in tuning.jobs.items()}
            timer.save()  # under the lock: merged with what exports beside this one saved meanwhile
        timer.release()
        for key, job in tuning.jobs.items():
            totals = times[key]
            fastest = min(range(len(totals)), key=lambda i: (totals[i], i))
            if fastest and totals[fastest] < float("inf"):
                tuning.chosen[key] = job.candidates[fastest][0]
                report.line(f"tuned {job.kernel.family} step {program.steps.index(job.kernel)}, {key[1][0]}..{key[1][1]}: "
                            f"{_describe(job.candidates[0][0])} {totals[0]:.4f} ms -> "
                            f"{_describe(job.candidates[fastest][0])} {totals[fastest]:.4f} ms (summed over "
                            f"{len(job.sizes)} sizes)")
        if timer.failures:
            report.line(f"note: {len(timer.failures)} tuning candidates could not run here and were not chosen; "
                        f"the first: {timer.failures[0]}")
        if timer.mismatches:  # a compiler's or a template's bug, which the table's configuration did not hit
            report.line(f"warning: {len(timer.mismatches)} tuning candidates computed another result than the "
                        f"table's configuration and were not chosen; the first: {timer.mismatches[0]}")
        report.line(f"tuned {len(tuning.jobs)} kernel buckets ({timer.measured} timings, {timer.cached} from the cache) "
                    f"in {time.perf_counter() - start:.1f} s: {len(tuning.chosen)} changed from the table's choice")
    tuning.collecting = False
    return render(tuning)


class Timer:
    """Times rendered kernels on the GPU (device 0, which the export checked is of the target's architecture)."""

    def __init__(self, program: Program, prelude: str, arch: int | None, shared_limit: int | None = None) -> None:
        import torch
        import triton

        self.torch, self.triton = torch, triton
        self.program, self.prelude, self.arch = program, prelude, arch
        self.shared_limit = shared_limit  # bytes of shared memory every target architecture gives a block
        self.gpu = torch.cuda.get_device_name(0)
        self.path = knobs.cache_dir() / "tuning" / (hashlib.sha256(self.gpu.encode()).hexdigest()[:16] + ".json")
        self.cache: dict[str, float] = _read_cache(self.path)
        self.measured = self.cached = 0
        self.compiled: dict[str, Any] = {}
        self.failures: list[str] = []  # candidates that did not compile or launch
        self.mismatches: list[str] = []  # candidates whose output differed from the table configuration's

    def _key(self, kernel: TritonKernel, values: dict[sympy.Symbol, int]) -> str:
        sizes = ",".join(f"{s.name}={v}" for s, v in sorted(values.items(), key=lambda kv: kv[0].name))
        return hashlib.sha256(f"{self.gpu}|{self.triton.__version__}|{self.arch}|{kernel.name}|{sizes}|{INPUTS}"
                              .encode()).hexdigest()

    def _shared_key(self, kernel: TritonKernel) -> str:
        """The cache's entry for the shared memory bytes a block of the kernel takes (recorded when timed)."""
        return hashlib.sha256(f"shared|{self.triton.__version__}|{self.arch}|{kernel.name}".encode()).hexdigest()

    def _too_large(self, kernel: TritonKernel) -> bool:
        """Whether a block of the kernel needs more shared memory than some target architecture gives one."""
        shared = self.cache.get(self._shared_key(kernel))
        return self.shared_limit is not None and shared is not None and shared > self.shared_limit

    def compile(self, jobs: list[Job]) -> None:
        """Every candidate that some size of its job has no cached time for, compiled in one batch, with its
        job's table configuration (whose output it is checked against)."""
        from .compile import launchable_kernels

        todo: dict[str, TritonKernel] = {}
        for job in jobs:
            stale = [k for _, k, _ in job.candidates if any(self._key(k, v) not in self.cache for v in job.sizes)]
            todo.update({k.name: k for k in ([job.candidates[0][1], *stale] if stale else [])})
        self.compiled.update(launchable_kernels(self.prelude, list(todo.values()), self.arch or 90))

    def times(self, job: Job) -> list[float]:
        """Each candidate's milliseconds summed over the job's sizes (infinity: it cannot run here)."""
        totals = [0.0] * len(job.candidates)
        mask_only = _mask_only_buffers(job.kernel)
        for values in job.sizes:
            buffers = None  # allocated once per size, for the candidates not in the cache
            # The table's configuration's output on those buffers (the output is the last), which the others'
            # must match; None where the table's cannot run here (nothing to compare with).
            reference, referenced = None, False
            for i, (_, kernel, grid) in enumerate(job.candidates):
                key = self._key(kernel, values)
                if key in self.cache:
                    self.cached += 1
                else:
                    buffers = buffers or [self._buffer(b, values, b in mask_only) for b in job.args]
                    if i > 0 and not referenced:  # the table's time was cached: its output is made again
                        _, table, table_grid = job.candidates[0]
                        reference, referenced = self._output(table, table_grid, values, buffers), True
                    self.cache[key] = self._time(kernel, grid, values, buffers, reference)
                    if i == 0:
                        finite = self.cache[key] < float("inf")
                        reference, referenced = (buffers[-1].clone() if finite else None), True
                    self.measured += 1
                totals[i] += self.cache[key]
        # A candidate some target cannot load is not chosen, the table's either: where none fits, the table's stays
        # (tuned_library keeps it at an infinite time) and the compile stage renders it smaller (fit.py).
        for i, (_, kernel, _) in enumerate(job.candidates):
            if self._too_large(kernel):
                shared = self.cache[self._shared_key(kernel)]
                self.failures.append(f"{kernel.name}: needs {shared:.0f} bytes of shared memory per block, more "
                                     f"than a target architecture gives ({self.shared_limit})")
                totals[i] = float("inf")
        return totals

    def _time(self, kernel: TritonKernel, grid: tuple[sympy.Expr, ...], values: dict[sympy.Symbol, int],
              buffers: list[Any], reference: Any = None) -> float:
        """Median milliseconds of one launch at `values`; infinity for a candidate that does not compile or
        launch here (too much shared memory, say) or whose output differs from `reference`."""
        try:
            launch = self._launcher(kernel, grid, values, buffers)
            if launch is None:
                return 0.0
            launch()
            self.torch.cuda.synchronize()
            if reference is not None and (difference := _difference(buffers[-1], reference)):
                self.mismatches.append(f"{kernel.name} ({_describe(kernel.config) if kernel.config else ''}): "
                                       f"{difference}")
                return float("inf")
            return float(self.triton.testing.do_bench(launch, warmup=5, rep=20, return_mode="median"))
        except Exception as e:  # noqa: BLE001 - a candidate that cannot launch here is not chosen
            self.failures.append(f"{kernel.name}: {type(e).__name__}: {str(e)[:200]}")
            return float("inf")

    def _output(self, kernel: TritonKernel, grid: tuple[sympy.Expr, ...], values: dict[sympy.Symbol, int],
                buffers: list[Any]) -> Any:
        """The kernel's output on `buffers` (one launch); None where it cannot launch (nothing to compare with)."""
        try:
            launch = self._launcher(kernel, grid, values, buffers)
            if launch is None:
                return None
            launch()
            self.torch.cuda.synchronize()
            return buffers[-1].clone()
        except Exception:  # noqa: BLE001 - the table's failure was reported when it was timed
            return None

    def _launcher(self, kernel: TritonKernel, grid: tuple[sympy.Expr, ...], values: dict[sympy.Symbol, int],
                  buffers: list[Any]) -> Callable[[], Any] | None:
        """One launch of the kernel at `values` on `buffers`, as a call; None for an empty grid. Raises for a
        candidate that did not compile."""
        compiled = self.compiled.get(kernel.name)
        if compiled is None or isinstance(compiled, Exception):
            raise RuntimeError(f"not compiled: {compiled}")
        self.cache[self._shared_key(kernel)] = float(compiled.metadata.shared)
        torch = self.torch
        symbols = self.program.symbols
        args: list[Any] = [*buffers, *(values[symbols[i].expr] for i in kernel.symbols)]
        if kernel.errors:
            args.append(torch.zeros(1, dtype=torch.int32, device="cuda"))
        if kernel.split_programs:  # split-K's counts (each launch leaves them zero) and workspace
            args += [torch.zeros(kernel.split_programs, dtype=torch.int32, device="cuda"),
                     torch.empty(kernel.split_programs * kernel.split_tile_bytes // 4, dtype=torch.float32, device="cuda")]
        args += [v for _, v in kernel.constexprs]
        blocks = tuple(evaluate(g, values) for g in grid)
        if min(blocks) <= 0:
            return None
        launch = compiled[blocks]
        # Triton's launcher takes a kernel's global scratch (TMA descriptors) from the allocator set for the
        # calling context: set in a copy, so the exporting process keeps its own.
        context = contextvars.copy_context()
        context.run(self.triton.set_allocator, _scratch_allocator)
        return lambda: context.run(launch, *args)

    def _buffer(self, name: str, values: dict[sympy.Symbol, int], mask_only: bool = False):
        """A buffer of random values (floating) or zeros (integers: indices stay in range) at `values`; ones for
        the integers and booleans an attention mask alone reads (see _mask_only_buffers)."""
        torch = self.torch
        buffer = self.program.buffers[name]
        count = 1
        for extent in buffer.shape:
            count *= max(evaluate(extent, values), 1)
        dtype = torch.int8 if buffer.dtype == "bool" else getattr(torch, buffer.dtype)  # kernels take bool as i8
        if is_float(buffer.dtype):
            return torch.randn(count, device="cuda", dtype=torch.float32).to(dtype)
        return (torch.ones if mask_only else torch.zeros)(count, device="cuda", dtype=dtype)

    def release(self) -> None:
        """The candidates' buffers given back, for verification and the exports beside this one."""
        self.torch.cuda.empty_cache()

    def save(self) -> None:
        """The cache file with this export's times added (callers hold the timing lock)."""
        write_cache_file(self.path, json.dumps({**_read_cache(self.path), **self.cache}, sort_keys=True))


def _difference(output: Any, reference: Any) -> str:
    """How `output` differs from `reference` beyond MISMATCH, or "" where it does not. A NaN or infinity where
    the reference has a finite value (or none where it has one) is a difference."""
    out, ref = output.float(), reference.float()
    if not bool((out.isfinite() == ref.isfinite()).all()):
        return "NaN or infinity where the table's output has none, or none where it has one"
    finite = ref.isfinite()
    scale = float(ref[finite].abs().max()) if bool(finite.any()) else 0.0
    largest = float((out[finite] - ref[finite]).abs().max()) if bool(finite.any()) else 0.0
    return f"largest difference {largest:.3g} against largest magnitude {scale:.3g}" \
        if largest > MISMATCH * max(scale, 1e-30) else ""


def _mask_only_buffers(kernel: Kernel) -> frozenset[str]:
    """The buffers an attention kernel reads through its mask alone (not as q, k or v): a padding mask such as
    transformers' attention_mask. Tuning fills their integers with ones, every key kept: the case without padding,
    which the kernel walks in its pipelined loop with no mask read (templates/triton/attention.py.jinja,
    `skip_dead_keys`). Zeros masked every key, and the kernel then walked every block reading the mask in its
    unpipelined loop: a path real inputs take for a fully padded sequence only, for which BERT's 2048-row bucket
    was tuned until session 25. A bad index read from such a buffer is reported and never read, as in any kernel."""
    if not isinstance(kernel, AttentionKernel) or kernel.mask is None:
        return frozenset()
    return frozenset(kernel.reads()) - {kernel.q.buffer, kernel.k.buffer, kernel.v.buffer}


@contextlib.contextmanager
def _timing_lock() -> Iterator[None]:
    """One export times kernels on this machine at a time (exports running side by side would time each
    other's kernels); compiling the candidates, before it, runs in parallel."""
    path = knobs.cache_dir() / "tuning" / "timing.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _scratch_allocator(size: int, alignment: int, stream: int | None):
    import torch

    return torch.empty(size, dtype=torch.int8, device="cuda")  # torch's blocks are 512-byte aligned


def _describe(config: Config) -> str:
    return " ".join(f"{k}={v}" for k, v in config.__dict__.items())


def _read_cache(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}

