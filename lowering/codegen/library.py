"""The render chain every backend shares: a program's steps -> kernels from templates -> one library.

A backend's renderer subclasses `KernelRenderer` with one method per kernel family (named after
`Kernel.family`: pointwise, reduction, row, scatter, matmul, attention) that returns the template to render
and the plain data it gets, and `finish`, which names the rendered kernel (a hash of its source, so a
model's repeated layers share one kernel) and records what the backend needs to compile and launch it.

A renderer may name a kernel's deciding size (`deciding_size`: a matrix product's rows, say); the step is
then rendered once per bucket of that size's range (ir/buckets.py), with `max` of the size capped at the
bucket's top, so each bucket's configuration is chosen for the sizes it covers. Buckets that render the
same kernel merge; a step whose buckets all agree has one kernel, as without buckets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy

from ...errors import UnsupportedError
from ..ir.buckets import bucket_uppers
from ..ir.kernels import Kernel, Program, StridedView, writes
from ..ir.symbolic import lower_bound, upper_bound
from .body import BodyWriter
from .templates import template_env


@dataclass(frozen=True)
class RenderedKernel:
    name: str
    family: str
    source: str


@dataclass(frozen=True)
class Variant:
    """A step's kernel for the sizes up to `upto` of its deciding size (above the previous variant's)."""

    upto: int
    kernel: str
    launch: Any


@dataclass(frozen=True)
class StepVariants:
    """A step's kernels per bucket of `size`: the first variant whose `upto` the size does not exceed runs;
    above them all, the step's own kernel (rendered for the whole range) runs, which is also what a runtime
    that ignores variants runs: every variant computes the same result."""

    size: sympy.Expr
    variants: tuple[Variant, ...]


@dataclass(frozen=True)
class RenderedLibrary:
    """Every step of a program in one language: the prelude, then each distinct kernel once, then what the
    language's renderer ends a library with (the C++ kernel table)."""

    source: str  # the whole library: prelude, kernels, epilogue
    prelude: str  # the helpers every kernel may call
    kernels: tuple[RenderedKernel, ...]
    step_kernels: tuple[str, ...]  # kernel name of each program step
    step_args: tuple[tuple[str, ...], ...]  # buffer names passed to each step: its reads, then its output
    step_launches: tuple[Any, ...]  # what the runtime needs to launch each step (CUDA: the grid), or None
    step_variants: tuple[StepVariants | None, ...] = ()  # per step: its kernels per bucket, or None

    def variants_of(self, step: int) -> StepVariants | None:
        return self.step_variants[step] if self.step_variants else None


class KernelRenderer:
    language = ""  # the templates/ folder: "cpp", "triton"
    language_name = ""  # for messages: "C++", "Triton"

    def __init__(self, program: Program) -> None:
        self.program = program
        self.env = template_env(self.language)
        self.symbol_index = {s.expr: i for i, s in enumerate(program.symbols)}
        self.ranges = {s.expr: (s.min, s.max) for s in program.symbols}
        self._cap: tuple[sympy.Expr, int] | None = None  # (deciding size, bucket top) while rendering a variant

    def args(self, kernel: Kernel) -> list[str]:
        """The buffers a kernel takes, in order: what it reads, then what it writes, its output last."""
        return [*kernel.reads(), *writes(kernel)]

    def names(self, kernel: Kernel) -> tuple[dict[str, str], dict[sympy.Symbol, str]]:
        """Kernel-local names of its buffers (in0, in1, ..., out) and of the program's symbols (s_<name>)."""
        args = self.args(kernel)
        arg_names = {b: ("out" if i == len(args) - 1 else f"in{i}") for i, b in enumerate(args)}
        return arg_names, {s: f"s_{s.name}" for s in self.symbol_index}

    def used_symbols(self, exprs: list[sympy.Expr]) -> list[tuple[sympy.Symbol, int]]:
        """The program symbols (with their indices) that `exprs` use, in the program's order."""
        used: set[sympy.Symbol] = set()
        for e in exprs:
            used |= sympy.sympify(e).free_symbols
        return [(s, i) for s, i in self.symbol_index.items() if s in used]

    def max(self, expr: sympy.Expr) -> int:
        """The largest value of a size over the declared ranges (at least 1): what block sizes are chosen for.
        While a bucket's variant renders, its deciding size is capped at the bucket's top."""
        top = max(upper_bound(expr, self.ranges), 1)
        if self._cap is not None and sympy.sympify(expr) == self._cap[0]:
            return min(top, self._cap[1])
        return top

    def deciding_size(self, kernel: Kernel) -> sympy.Expr | None:
        """The size whose buckets get variants of this kernel, or None: one kernel for the whole range."""
        return None

    def bucket(self, kernel: Kernel) -> tuple[int, int] | None:
        """The sizes of the kernel's deciding size that the render in progress is for: a bucket's variant
        covers its bucket, the whole-range kernel the top bucket (it runs above every variant). None: no
        deciding size."""
        size = self.deciding_size(kernel)
        if size is None:
            return None
        size = sympy.sympify(size)
        lo, hi = max(lower_bound(size, self.ranges), 1), max(upper_bound(size, self.ranges), 1)
        uppers = bucket_uppers(lo, hi) if not size.is_Integer else (hi,)
        top = self._cap[1] if self._cap is not None and self._cap[0] == size else hi
        below = [u for u in uppers if u < top]
        return (below[-1] + 1 if below else lo, top)

    def render_variants(self, kernel: Kernel) -> tuple[RenderedKernel, Any, list[tuple[RenderedKernel, Variant]]]:
        """The kernel for the whole range and its launch, and the variants of the buckets below the top one
        that differ from it (with their rendered kernels)."""
        whole, launch = self.render(kernel)
        size = self.deciding_size(kernel)
        if size is None or sympy.sympify(size).is_Integer:
            return whole, launch, []
        uppers = bucket_uppers(max(lower_bound(size, self.ranges), 1), self.max(size))
        variants: list[tuple[RenderedKernel, Variant]] = []
        try:
            for upto in uppers[:-1]:
                self._cap = (sympy.sympify(size), upto)
                rendered, bucket_launch = self.render(kernel)
                if variants and variants[-1][0].name == rendered.name:
                    variants[-1] = (rendered, Variant(upto, rendered.name, bucket_launch))  # same kernel: widen
                else:
                    variants.append((rendered, Variant(upto, rendered.name, bucket_launch)))
        finally:
            self._cap = None
        while variants and variants[-1][0].name == whole.name:  # the top buckets that agree with the whole range
            variants.pop()
        return whole, launch, variants

    @staticmethod
    def view(view: StridedView, writer: BodyWriter) -> dict[str, Any]:
        return {"offset": writer.index(view.offset), "strides": [writer.index(s) for s in view.strides]}

    def render(self, kernel: Kernel) -> tuple[RenderedKernel, Any]:
        """One kernel rendered, and how to launch its step."""
        family = getattr(self, kernel.family, None)
        if family is None:
            raise UnsupportedError(f"no {self.language_name} template for {type(kernel).__name__}")
        template, data = family(kernel)
        body = self.env.get_template(template).render(name="KERNEL_NAME", **data)
        return self.finish(kernel, body, data)

    def finish(self, kernel: Kernel, body: str, data: dict[str, Any]) -> tuple[RenderedKernel, Any]:
        """The rendered kernel named (its source's KERNEL_NAME replaced), and its step's launch data."""
        raise NotImplementedError

    def prelude(self, kernels: list[RenderedKernel]) -> str:
        raise NotImplementedError

    def companions(self, kernel: RenderedKernel) -> tuple[RenderedKernel, ...]:
        """Kernels the library holds besides the steps' own because `kernel` names them (a split-K product's
        unsplit twin); none by default."""
        return ()

    def epilogue(self, kernels: list[RenderedKernel]) -> str:
        """What follows every kernel in the library (the C++ one's kernel table); nothing by default."""
        return ""


def render_library(renderer: KernelRenderer) -> RenderedLibrary:
    """Every step of the renderer's program: the prelude, then each distinct kernel once."""
    kernels: dict[str, RenderedKernel] = {}
    names, args, launches, step_variants = [], [], [], []
    for step in renderer.program.steps:
        rendered, launch, variants = renderer.render_variants(step)
        for kernel in (rendered, *(k for k, _ in variants)):
            kernels.setdefault(kernel.name, kernel)
            for companion in renderer.companions(kernel):
                kernels.setdefault(companion.name, companion)
        names.append(rendered.name)
        args.append(tuple(renderer.args(step)))
        launches.append(launch)
        step_variants.append(StepVariants(renderer.deciding_size(step), tuple(v for _, v in variants))
                             if variants else None)
    prelude = renderer.prelude(list(kernels.values()))
    source = prelude + "\n" + "\n".join(k.source for k in kernels.values())
    epilogue = renderer.epilogue(list(kernels.values()))
    if epilogue:
        source += "\n" + epilogue
    return RenderedLibrary(source, prelude, tuple(kernels.values()), tuple(names), tuple(args), tuple(launches),
                           tuple(step_variants))
