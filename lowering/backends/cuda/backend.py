"""The CUDA backend: Triton kernels cross-compiled to one cubin per kernel and compute capability."""

from __future__ import annotations

from typing import Any

from ....packages import layout
from ....packages.writer import canonical_json
from ...codegen.library import RenderedLibrary
from ...codegen.printer import to_json
from ...ir.kernels import Program
from ..interface import Artifacts, Backend, LayoutPass
from .render import TritonKernel, render_triton_library
from .weight_layout import transpose_kn_weights


class CudaBackend(Backend):
    kind = "cuda"
    language = "triton"

    @property
    def archs(self) -> tuple[int, ...]:
        return self.target.archs

    def layout_passes(self) -> tuple[tuple[str, LayoutPass], ...]:
        # the module's global, looked up at each call: scripts/pdl_bench.py's variants may replace it
        return (("transpose_kn_weights", transpose_kn_weights),)

    def render(self, program: Program) -> RenderedLibrary:
        return render_triton_library(program, self.archs, tune=self.target.tune)

    def compile(self, program: Program, library: RenderedLibrary) -> Artifacts:
        """Binaries arch -> compile.CompiledArch, and the library compiled: `library`, with any kernel whose block
        needs more shared memory than a target gives rendered smaller (fit.py)."""
        from .fit import compile_fitting  # imports Triton only when exporting for CUDA

        library, binaries = compile_fitting(program, library, self.archs, lambda shrunk: render_triton_library(
            program, self.archs, tune=self.target.tune, shrunk=shrunk))
        return Artifacts(library, binaries)

    def describe_binaries(self, binaries: dict[int, Any]) -> str:
        return "\n".join(f"sm_{arch}: {len(c.kernels)} cubins, {sum(len(k.cubin) for k in c.kernels.values())} bytes, "
                         f"PTX {c.ptx_version}" for arch, c in binaries.items())

    def plan_section(self, library: RenderedLibrary, ids: dict[str, int]) -> dict[str, Any]:
        """The kernels' symbols and error messages, and each step's launch grid and its kernels per bucket of
        its deciding size (docs/package-format.md)."""
        by_name = {k.name: k for k in library.kernels}
        steps = []
        for i, (kernel, args, grid) in enumerate(zip(library.step_kernels, library.step_args, library.step_launches)):
            step: dict[str, Any] = {**_launch(by_name[kernel], grid), "args": [ids[a] for a in args]}
            variants = library.variants_of(i)
            if variants is not None:
                step["variants"] = {"size": to_json(variants.size), "buckets": [
                    {"upto": v.upto, **_launch(by_name[v.kernel], v.launch)} for v in variants.variants]}
            steps.append(step)
        return {
            "kernels": [{"name": k.name, "symbols": list(k.symbols), "errors": list(k.errors), "family": k.family,
                         "config": {**dict(k.constexprs), "num_warps": k.num_warps, "num_stages": k.num_stages,
                                    **({"persistent_tma": True} if k.persistent else {}),
                                    **({"tma_loads": True} if getattr(k.config, "tma", False) else {}),
                                    **({"tma_store": True} if getattr(k.config, "tma_store", False) else {}),
                                    **({"early_launch": True} if k.early_launch else {}),
                                    **({"l2_prefetch": True} if k.l2_prefetch else {}),
                                    **({"paired": True} if k.paired else {})},
                         **({"split": {"programs": k.split_programs, "tile_bytes": k.split_tile_bytes}}
                            if k.split_programs else {})}
                        for k in library.kernels],
            "steps": steps,
        }

    def package_members(self, artifacts: Artifacts) -> dict[str, bytes]:
        """cuda/sm_<cc>/<kernel>.cubin and cuda/sm_<cc>/kernels.json per architecture, and the Triton source."""
        members: dict[str, bytes] = {}
        for arch, compiled in sorted(artifacts.binaries.items()):
            entries = []
            for kernel in artifacts.library.kernels:
                c = compiled.kernels[kernel.name]
                members[layout.cuda_cubin(arch, kernel.name)] = c.cubin
                entries.append({"name": kernel.name, "cubin": layout.cuda_cubin(arch, kernel.name), "function": c.name,
                                "num_warps": c.num_warps, "shared": c.shared,
                                "global_scratch_size": c.global_scratch_size,
                                "global_scratch_align": c.global_scratch_align,
                                "profile_scratch_size": c.profile_scratch_size, "ptx_version": c.ptx_version,
                                "pdl": kernel.pdl})
            members[layout.cuda_kernels(arch)] = canonical_json({"arch": arch, "kernels": entries})
        members[layout.CUDA_SOURCE] = artifacts.library.source.encode()
        return members

    def manifest_target(self, artifacts: Artifacts) -> dict[str, Any]:
        compiled = [artifacts.binaries[a] for a in sorted(artifacts.binaries)]
        ptx = max((c.ptx_version for c in compiled), key=lambda v: tuple(map(int, v.split("."))) if v else (0,))
        return {"kind": "cuda", "archs": sorted(artifacts.binaries), "ptx_version": ptx,
                "configurations": "tuned" if self.target.tune else "tables",
                "min_driver_version": max(c.min_cuda_driver for c in compiled), "source": layout.CUDA_SOURCE}

    def producer_versions(self) -> dict[str, str]:
        from .compile import triton_version

        return {"triton": triton_version() or "unknown"}


def _launch(kernel: TritonKernel, grid) -> dict[str, Any]:
    """A launch's "kernel" and "grid"; a split-K kernel goes under "split", its unsplit twin in their place, so a
    runtime that does not know split-K launches the twin (docs/package-format.md)."""
    if kernel.fallback is None:
        return {"kernel": kernel.name, "grid": [to_json(g) for g in grid]}
    twin, twin_grid = kernel.fallback
    return {"kernel": twin.name, "grid": [to_json(g) for g in twin_grid],
            "split": {"kernel": kernel.name, "grid": [to_json(g) for g in grid]}}
