"""The CPU backend: C++ kernels in one shared library per package, for an x86-64 ISA level."""

from __future__ import annotations

import platform
from typing import Any

from .... import knobs
from ....packages import layout
from ...codegen.library import RenderedLibrary
from ...ir.kernels import Program
from ..interface import Artifacts, Backend, LayoutPass
from .compile import compile_cpp_library, compiler_version
from .prepack import prepack_weights
from .render import render_cpp_library


class CpuBackend(Backend):
    kind = "cpu"
    language = "cpp"

    @property
    def isa(self) -> str:
        return self.target.isa

    def layout_passes(self) -> tuple[tuple[str, LayoutPass], ...]:
        return (("prepack_weights", prepack_weights),)

    def render(self, program: Program) -> RenderedLibrary:
        return render_cpp_library(program)

    def compile(self, program: Program, library: RenderedLibrary) -> Artifacts:
        return Artifacts(library, compile_cpp_library(library.source, self.isa))

    def describe_binaries(self, binaries: bytes) -> str:
        return f"kernels.so: {len(binaries)} bytes"

    def package_members(self, artifacts: Artifacts) -> dict[str, bytes]:
        return {layout.cpu_library(self.isa): artifacts.binaries,
                layout.cpu_source(self.isa): artifacts.library.source.encode()}

    def manifest_target(self, artifacts: Artifacts) -> dict[str, Any]:
        return {"kind": "cpu", "arch": platform.machine(), "isa": self.isa, "library": layout.cpu_library(self.isa)}

    def producer_versions(self) -> dict[str, str]:
        return {"compiler": compiler_version(knobs.cxx())}
