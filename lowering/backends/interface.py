"""The compiler backend interface: everything the compiler does that differs per target, behind one class.

A backend is made for one target descriptor (targets.py) and fills in, in pipeline order:

    layout_passes  kernel IR -> kernel IR, laying data out the way its kernels read it (CPU: weight panels)
    render         kernel IR -> a RenderedLibrary in its language, through the codegen core
    compile        RenderedLibrary -> its binaries (a shared library, cubins), and the library they were
                   compiled from (CUDA renders a kernel smaller where its block does not fit a target)
    plan_section   what program.json holds for it beyond the plain step list (CUDA: grids, error messages)
    package_members, manifest_target, producer_versions   what it adds to the package file

lowering/stages.py builds the pipeline from the backends of a package's targets; the core never asks
which target it is compiling for. Adding a target is a new folder beside cpu/ and cuda/ with a Backend
subclass, its spellings (codegen/ drives them) and its templates, registered in backends/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ...packages.program import StepEntry
from ..codegen.library import RenderedLibrary
from ..ir.kernels import Program

LayoutPass = Callable[[Program], Program]


@dataclass(frozen=True)
class Artifacts:
    """What one backend made of a program: its rendered library, then its compiled binaries."""

    library: RenderedLibrary | None = None
    binaries: Any = None


class Backend:
    kind: ClassVar[str] = ""  # the target's kind ("cpu", "cuda"): the key of its artifacts and program section
    language: ClassVar[str] = ""  # its kernels' language ("cpp", "triton"): names its stages and templates/

    def __init__(self, target: Any) -> None:
        self.target = target

    def layout_passes(self) -> tuple[tuple[str, LayoutPass], ...]:
        """Named IR -> IR passes that lay data out for this target, run before memory planning."""
        return ()

    def render(self, program: Program) -> RenderedLibrary:
        raise NotImplementedError

    def compile(self, program: Program, library: RenderedLibrary) -> Artifacts:
        """The library's binaries, with the library they were compiled from: `library`, or the program rendered
        again where a kernel as rendered could not run on a target (CUDA: a block needing more shared memory than
        it gives, cuda/fit.py). What later stages package is the returned library."""
        raise NotImplementedError

    def describe_binaries(self, binaries: Any) -> str:
        """A line or two on what `compile` made, for `--dump compile_<language>`."""
        raise NotImplementedError

    def plan_steps(self, library: RenderedLibrary, ids: dict[str, int]) -> tuple[StepEntry, ...]:
        """Its steps as program.json's plain step list: each step's kernel and buffer ids."""
        return tuple(StepEntry(k, tuple(ids[a] for a in args)) for k, args in zip(library.step_kernels, library.step_args))

    def plan_section(self, library: RenderedLibrary, ids: dict[str, int]) -> dict[str, Any] | None:
        """Its own section of program.json (under `kind`), or None when the plain steps say everything."""
        return None

    def package_members(self, artifacts: Artifacts) -> dict[str, bytes]:
        """Package members (path -> bytes) holding its kernels, in the order they are written."""
        raise NotImplementedError

    def manifest_target(self, artifacts: Artifacts) -> dict[str, Any]:
        """Its entry of the manifest's `targets`."""
        raise NotImplementedError

    def producer_versions(self) -> dict[str, str]:
        """The tools its binaries depend on, for the manifest's `producer`."""
        return {}
