"""Cross-compiles a rendered Triton module to one cubin per kernel and CUDA architecture, with no GPU.

Uses Triton's compiler API directly, as shared/reference/triton_aot.md recommends:
`triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", arch, 32))`.
Triton bundles ptxas, so no CUDA toolkit and no driver are needed. Results are cached per kernel, by the
hash of the prelude, the kernel's own source, its options, the architecture and the Triton version: a
change to one kernel, or a model that shares kernels with an earlier one, recompiles only what differs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import importlib.util
import json
import multiprocessing
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from .... import knobs, progress
from ....errors import AotpackError
from ...codegen.library import RenderedLibrary
from ..cache_file import write_cache_file
from .render import TritonKernel


class TritonCompileError(AotpackError):
    pass


# The most dynamic shared memory one block may opt into, per compute capability (bytes; the CUDA C++
# Programming Guide's table of technical specifications). The runtime refuses a kernel that needs more
# (cuda_executable.cpp), so an export checks first: a package never carries a kernel its targets cannot load.
SHARED_MEMORY_PER_BLOCK = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448, 103: 232448,
                           120: 101376}


def shared_memory_limit(archs: tuple[int, ...]) -> int | None:
    """The least of the architectures' limits; None when none of them is known."""
    known = [SHARED_MEMORY_PER_BLOCK[a] for a in archs if a in SHARED_MEMORY_PER_BLOCK]
    return min(known) if known else None


@dataclass(frozen=True)
class CompiledKernel:
    name: str  # the cubin's entry point (Triton names it after the Python function)
    cubin: bytes
    num_warps: int
    shared: int  # dynamic shared memory bytes
    global_scratch_size: int
    global_scratch_align: int
    profile_scratch_size: int
    ptx_version: str  # the PTX ISA version Triton emitted, e.g. "8.7"


@dataclass(frozen=True)
class CompiledArch:
    arch: int
    kernels: dict[str, CompiledKernel]

    @property
    def min_cuda_driver(self) -> int:
        """cuDriverGetVersion() the cubins need: the CUDA major of the ptxas that built them, as 1000*major.

        Cubins built by CUDA 12.x ptxas run on any 12.x-or-later driver (minor version compatibility);
        PTX ISA 8.x comes from CUDA 12, 9.x from CUDA 13."""
        majors = {int(k.ptx_version.split(".")[0]) for k in self.kernels.values()} or {8}
        return (max(majors) + 4) * 1000

    @property
    def ptx_version(self) -> str:
        return max((k.ptx_version for k in self.kernels.values()), default="", key=lambda v: tuple(map(int, v.split("."))))


def triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def _require_triton():
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        raise TritonCompileError(
            "exporting for CUDA needs Triton, which is not installed here; install it with "
            "`pip install 'aotpack[cuda]'` (or `pip install triton`)") from e
    major, minor = (int(p) for p in re.findall(r"\d+", triton.__version__)[:2])
    if (major, minor) < (3, 3):
        raise TritonCompileError(f"Triton {triton.__version__} is too old for aotpack's CUDA export; 3.3 or later is needed")
    return triton, ASTSource, GPUTarget


# Multiplies and adds contract to fused multiply-adds: Triton's default, and what eager PyTorch's own CUDA
# kernels do (nvcc contracts unless told --fmad=false), unlike its CPU kernels, which is why the C++ backend
# compiles with -ffp-contract=off. One rounding instead of two, and the attention softmax's
# exp2(x * c - max * c) is one instruction per score. A cubin computes the same bits on every run either way.
FP_FUSION = True


def _load_module(source: str, directory: Path):
    """The rendered module imported from a real file: Triton reads kernel sources through inspect."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    path = directory / f"aotpack_triton_{digest}.py"
    if not path.exists():
        write_cache_file(path, source)
    name = f"aotpack_triton_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _ptx_version(ptx: str) -> str:
    match = re.search(r"^\s*\.version\s+(\d+\.\d+)", ptx, re.MULTILINE)
    return match.group(1) if match else ""


def _compile_in_worker(source: str, directory: Path, kernel: TritonKernel, arch: int) -> CompiledKernel:
    """One kernel compiled in a worker process (the module is imported there from the same file)."""
    triton, ASTSource, GPUTarget = _require_triton()
    return _compile_one(triton, ASTSource, GPUTarget, _load_module(source, directory), kernel, arch)


def _compile_one(triton, ASTSource, GPUTarget, module, kernel: TritonKernel, arch: int) -> CompiledKernel:
    ck = _triton_compile(triton, ASTSource, GPUTarget, module, kernel, arch)
    meta = ck.metadata
    return CompiledKernel(
        name=meta.name, cubin=bytes(ck.asm["cubin"]), num_warps=int(meta.num_warps), shared=int(meta.shared),
        global_scratch_size=int(getattr(meta, "global_scratch_size", 0) or 0),
        global_scratch_align=int(getattr(meta, "global_scratch_align", 1) or 1),
        profile_scratch_size=int(getattr(meta, "profile_scratch_size", 0) or 0),
        ptx_version=_ptx_version(ck.asm.get("ptx", "")))


def _triton_compile(triton, ASTSource, GPUTarget, module, kernel: TritonKernel, arch: int):
    """Triton's compiled kernel (cubin, metadata and launcher) of one rendered kernel, as every package
    compiles it."""
    fn = getattr(module, kernel.name)
    signature = dict(kernel.signature)
    constexprs = dict(kernel.constexprs)
    names = [n for n, _ in kernel.signature]
    # Every buffer the runtime passes is at least 64-byte aligned (arena offsets, cuMemAlloc'ed memory).
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, t in kernel.signature if t.startswith("*")}
    source = ASTSource(fn, signature, constexprs, attrs)
    options = {"num_warps": kernel.num_warps, "num_stages": kernel.num_stages, "enable_fp_fusion": FP_FUSION}
    try:
        with _without_line_info():
            ck = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as e:  # Triton raises many types; each is a bug in our templates, never the user's
        raise TritonCompileError(
            f"compiling the generated Triton kernel {kernel.name} ({kernel.family}) for sm_{arch} failed; this is "
            f"an aotpack bug, please report it with the model:\n{type(e).__name__}: {str(e)[-4000:]}") from e
    return ck


@contextlib.contextmanager
def _without_line_info() -> Iterator[None]:
    """Cubins without line info: it names the files the kernel was compiled from (the module written into the
    cache folder, Triton's own sources in site-packages), which would put this machine's paths into the
    package and make its bytes depend on where it was built. SASS is the same either way."""
    saved = os.environ.get("TRITON_DISABLE_LINE_INFO")
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TRITON_DISABLE_LINE_INFO", None)
        else:
            os.environ["TRITON_DISABLE_LINE_INFO"] = saved


def _cache_key(prelude: str, kernel: TritonKernel, arch: int, version: str) -> str:
    text = "\0".join([prelude, kernel.source, kernel.name, repr(kernel.signature), repr(kernel.constexprs),
                      f"{kernel.num_warps}/{kernel.num_stages}", str(arch), version, f"fp_fusion={int(FP_FUSION)}",
                      "line_info=0"])
    return hashlib.sha256(text.encode()).hexdigest()


def compile_triton_library(library: RenderedLibrary, archs: tuple[int, ...]) -> dict[int, CompiledArch]:
    """Cubins of every kernel of `library` for each compute capability in `archs` (e.g. 80, 90); a kernel whose
    block needs more shared memory than one of them gives is refused. The export's compile stage renders such
    kernels smaller instead (fit.py)."""
    compiled = compile_kernels(library, archs)
    for kernel, arch, shared, limit in oversized(library, compiled):
        config = ", ".join(f"{k}={v}" for k, v in kernel.constexprs)
        raise TritonCompileError(
            f"the {kernel.family} kernel {kernel.name} ({config}, {kernel.num_stages} stages) needs {shared} bytes of "
            f"shared memory per block, more than sm_{arch} GPUs give one ({limit}), so the package could not load "
            f"there; export without sm_{arch} in --cuda-arch (an aotpack bug otherwise: please report it with the "
            "model)")
    return compiled


def compile_kernels(library: RenderedLibrary, archs: tuple[int, ...],
                    done: Mapping[tuple[int, str], CompiledKernel] = {}) -> dict[int, CompiledArch]:
    """Cubins of every kernel of `library` for each of `archs`, whatever shared memory they need: from `done`
    (by architecture and kernel name, which hashes the kernel's source and options: fit.py's earlier rounds),
    else from the cache folder, else compiled."""
    triton = _require_triton()[0]
    cache = knobs.cache_dir() / "cuda"
    cache.mkdir(parents=True, exist_ok=True)
    compiled: dict[tuple[int, str], CompiledKernel] = {}
    todo: list[tuple[int, TritonKernel, Path, Path]] = []
    for arch in archs:
        for kernel in library.kernels:
            key = _cache_key(library.prelude, kernel, arch, triton.__version__)
            meta_path, cubin_path = cache / f"{key}.json", cache / f"{key}.cubin"
            if (arch, kernel.name) in done:
                compiled[arch, kernel.name] = done[arch, kernel.name]
            elif meta_path.exists() and cubin_path.exists():
                meta = json.loads(meta_path.read_text())
                compiled[arch, kernel.name] = CompiledKernel(cubin=cubin_path.read_bytes(), **meta)
            else:
                todo.append((arch, kernel, meta_path, cubin_path))
    for (arch, kernel, meta_path, cubin_path), result in zip(todo, _compile_all(library.source, cache, todo)):
        compiled[arch, kernel.name] = result
        for path, data in ((cubin_path, result.cubin),
                           (meta_path, json.dumps({k: v for k, v in result.__dict__.items() if k != "cubin"}).encode())):
            write_cache_file(path, data)
    return {arch: CompiledArch(arch, {k.name: compiled[arch, k.name] for k in library.kernels}) for arch in archs}


def oversized(library: RenderedLibrary,
              compiled: dict[int, CompiledArch]) -> list[tuple[TritonKernel, int, int, int]]:
    """(kernel, arch, its bytes of shared memory per block, the arch's limit) for each kernel whose block needs
    more than an architecture gives one, at the architecture it exceeds most; the runtime would refuse to load it
    there (cuda_executable.cpp)."""
    over = []
    for kernel in library.kernels:
        excess = [(compiled[arch].kernels[kernel.name].shared - limit, arch) for arch in sorted(compiled)
                  if (limit := SHARED_MEMORY_PER_BLOCK.get(arch)) is not None]
        worst = max(excess, default=(0, 0))
        if worst[0] > 0:
            arch = worst[1]
            over.append((kernel, arch, compiled[arch].kernels[kernel.name].shared, SHARED_MEMORY_PER_BLOCK[arch]))
    return over


# Below this many kernels to compile, starting worker processes (each imports Triton) costs more than it saves.
PARALLEL_MIN_KERNELS = 8


def _compile_all(source: str, cache: Path, todo: list) -> list[CompiledKernel]:
    """Compiles in worker processes when there are many kernels and cores: Triton's compiler holds the GIL,
    so threads would not overlap. Workers are spawned, not forked, so they never inherit a CUDA context."""
    workers = min(knobs.compile_jobs(), len(todo))
    if workers < 2 or len(todo) < PARALLEL_MIN_KERNELS:
        triton, ASTSource, GPUTarget = _require_triton()
        module = _load_module(source, cache) if todo else None
        results = []
        for arch, kernel, _, _ in todo:
            results.append(_compile_one(triton, ASTSource, GPUTarget, module, kernel, arch))
            progress.current().count(len(results), len(todo), "kernels compiled")
        return results
    _load_module(source, cache)  # write the module file once, before the workers import it
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = [pool.submit(_compile_in_worker, source, cache, kernel, arch) for arch, kernel, _, _ in todo]
        for done, _ in enumerate(concurrent.futures.as_completed(futures), 1):
            progress.current().count(done, len(todo), "kernels compiled")
        return [f.result() for f in futures]


def launchable_kernels(prelude: str, kernels: list[TritonKernel], arch: int) -> dict[str, object]:
    """Each kernel compiled exactly as a package's are, as Triton's compiled kernel, which launches on this
    machine's GPU with `ck[grid](*args)` (tuning.py times them); a kernel that does not compile maps to its
    TritonCompileError. Worker processes compile first when there are many: they fill Triton's own cache,
    which the compiles here then hit (the same source, options and target)."""
    triton, ASTSource, GPUTarget = _require_triton()
    if not kernels:
        return {}
    source = prelude + "\n" + "\n".join(k.source for k in kernels)
    directory = knobs.cache_dir() / "cuda"
    directory.mkdir(parents=True, exist_ok=True)
    module = _load_module(source, directory)
    workers = min(knobs.compile_jobs(), len(kernels))
    if workers >= 2 and len(kernels) >= PARALLEL_MIN_KERNELS:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = [pool.submit(_compile_in_worker, source, directory, kernel, arch) for kernel in kernels]
            for done, _ in enumerate(concurrent.futures.as_completed(futures), 1):
                progress.current().count(done, len(kernels), "candidate kernels compiled")
    compiled: dict[str, object] = {}
    for kernel in kernels:
        try:
            compiled[kernel.name] = _triton_compile(triton, ASTSource, GPUTarget, module, kernel, arch)
        except TritonCompileError as e:
            compiled[kernel.name] = e
    return compiled
