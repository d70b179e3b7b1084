"""Kernels rendered smaller until their blocks fit the shared memory of every target architecture.

A product's or attention's configuration comes from a table or from tuning, and the table's idea of the shared
memory a block takes can be wrong for a kernel whose fused epilogue stages more data, or under another Triton
version: Triton 3.6 gave GPT-2's first attention-output product (its epilogue gathers the embeddings) 262144
bytes at the table's 128 x 256 tile, over sm_90's 232448, where Triton 3.9 needed less. Only the compiled
cubin says for sure, and the runtime refuses a kernel that needs more than its GPU gives a block. So the
compile stage, rather than failing the export, renders each such kernel (the step's, or its bucket's variant)
at the next smaller configuration (`smaller_matmul_config`, `smaller_attention_config`: a pipeline stage
fewer, then a smaller tile at the stages it began with), compiles what changed, and repeats until every kernel
fits. Only a kernel with nothing smaller to try fails the export. Each change is reported as a note, and the
package carries the library as finally rendered, so the same model, targets and Triton give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .... import progress
from ...codegen.library import RenderedLibrary
from ...ir.kernels import Program
from ...ir.symbolic import lower_bound, upper_bound
from .attention_config import AttentionConfig, smaller_attention_config
from .compile import CompiledArch, CompiledKernel, TritonCompileError, compile_kernels, oversized
from .matmul_config import MatmulConfig, smaller_matmul_config
from .render import TritonKernel

Config = MatmulConfig | AttentionConfig


def compile_fitting(program: Program, library: RenderedLibrary, archs: tuple[int, ...],
                    render: Callable[[Mapping[str, Config]], RenderedLibrary]
                    ) -> tuple[RenderedLibrary, dict[int, CompiledArch]]:
    """`library` compiled for `archs`, with every kernel whose block needs more shared memory than one of them
    gives rendered smaller (`render(shrunk)`: the program rendered again as the render stage did, each kernel
    named in `shrunk` at that configuration instead); the library as compiled, and its cubins."""
    shrunk: dict[str, Config] = {}
    stages: dict[Config, int] = {}  # a smaller configuration -> the stages of the one first shrunk to it
    done: dict[tuple[int, str], CompiledKernel] = {}  # what earlier rounds compiled: only what changed compiles
    while True:
        compiled = compile_kernels(library, archs, done)
        done.update(((arch, name), kernel) for arch, c in compiled.items() for name, kernel in c.kernels.items())
        over = oversized(library, compiled)
        if not over:
            return library, compiled
        for kernel, arch, shared, limit in over:
            where = _where(program, library, kernel.name)
            smaller = _smaller(kernel.config, stages)
            if smaller is None or kernel.name in shrunk:  # (the second: a render that ignored `shrunk`, a bug)
                raise TritonCompileError(
                    f"the {kernel.family} kernel of {where} needs {shared} bytes of shared memory per block at "
                    f"{_describe(kernel)}, more than sm_{arch} GPUs give one ({limit}), and has no smaller "
                    f"configuration to try, so the package could not load there (`aotpack export --dump lower` "
                    f"lists the steps); export without sm_{arch} in --cuda-arch (this is an aotpack bug: please "
                    "report it with the model)")
            # A split-K kernel's unsplit twin (what runtimes without split-K launch) is rendered with it: when the
            # twin does not fit, the split kernel is rendered smaller too, which renders a smaller twin.
            owners = [k for k in library.kernels if isinstance(k, TritonKernel) and k.fallback is not None
                      and k.fallback[0].name == kernel.name]
            for owner in (kernel, *owners):
                shrunk[owner.name] = _smaller(owner.config, stages)
                stages.setdefault(shrunk[owner.name], stages.get(owner.config, owner.config.num_stages))
            progress.current().line(
                f"note: the {kernel.family} kernel of {where} needs {shared} bytes of shared memory per block at "
                f"{_describe(kernel)}, more than sm_{arch} gives one ({limit}): rendered again at "
                f"{_describe_config(smaller)}")
        library = render(shrunk)


def _smaller(config: Config | None, stages: Mapping[Config, int]) -> Config | None:
    """The next configuration to try; a smaller tile gets the stages its chain began with."""
    if isinstance(config, MatmulConfig):
        return smaller_matmul_config(config, stages.get(config))
    if isinstance(config, AttentionConfig):
        return smaller_attention_config(config, stages.get(config))
    return None  # only products and attention have configurations to shrink


def _describe(kernel: TritonKernel) -> str:
    if kernel.config is not None:
        return _describe_config(kernel.config)
    return ", ".join([*(f"{k}={v}" for k, v in kernel.constexprs), f"{kernel.num_stages} stages"])


def _describe_config(config: Config) -> str:
    """128 x 256 x 64, 8 warps, 3 stages (BM x BN x BK for a product; BM x BN for attention)."""
    sides = (config.bm, config.bn, config.bk) if isinstance(config, MatmulConfig) else (config.bm, config.bn)
    tile = " x ".join(str(v) for v in sides)
    extra = ", persistent" if isinstance(config, MatmulConfig) and config.persistent else ""
    extra += f", split-K {config.split_k}" if isinstance(config, MatmulConfig) and config.split_k > 1 else ""
    return f"{tile}, {config.num_warps} warps, {config.num_stages} stages{extra}"


def _where(program: Program, library: RenderedLibrary, name: str) -> str:
    """The steps, and the buckets of their deciding size, that launch kernel `name`: "step 3 (s*b 513..2048)"."""
    ranges = {s.expr: (s.min, s.max) for s in program.symbols}
    places = []
    for step, own in enumerate(library.step_kernels):
        variants = library.variants_of(step)
        if variants is None:
            if own == name:
                places.append(f"step {step}")
            continue
        lo = max(lower_bound(variants.size, ranges), 1)
        for variant in variants.variants:
            if variant.kernel == name:
                places.append(f"step {step} ({variants.size} {lo}..{variant.upto})")
            lo = variant.upto + 1
        if own == name:  # the step's own kernel runs above every variant
            places.append(f"step {step} ({variants.size} {lo}..{max(upper_bound(variants.size, ranges), 1)})")
    if not places:  # a companion: a split-K kernel's unsplit twin
        owners = [k.name for k in library.kernels if isinstance(k, TritonKernel) and k.fallback is not None
                  and k.fallback[0].name == name]
        return f"{', '.join(_where(program, library, o) for o in owners)} (unsplit twin)" if owners else name
    return ", ".join(places)
