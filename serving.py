"""Where the Triton Inference Server backend for aotpack packages is (`aotpack --triton-backend-dir`;
docs/serving.md). The folder printed is what `tritonserver --backend-directory` takes: it holds
`aotpack/libtriton_aotpack.so` and the libaotpack.so beside it that the backend loads.

One function, so that a packaging change (the wheel) changes only the candidate list below.
"""

from __future__ import annotations


from pathlib import Path

from .errors import AotpackError

BACKEND_LIBRARY = "libtriton_aotpack.so"


def _candidates() -> list[Path]:
    package_dir = Path(__file__).resolve().parent  # in a checkout, the repository root
    return [package_dir / "triton_backends",  # the wheel installs CMake's `triton_backends/` into the package
            package_dir / "build" / "runtime" / "triton_backends"]  # the CMake build tree (make runtime)


def triton_backend_dir() -> Path:
    """The backend directory holding aotpack/libtriton_aotpack.so, the first of the candidates that has it."""
    candidates = _candidates()
    for folder in candidates:
        if (folder / "aotpack" / BACKEND_LIBRARY).is_file():
            return folder
    looked = ", ".join(str(c / "aotpack" / BACKEND_LIBRARY) for c in candidates)
    raise AotpackError(f"cannot find the Triton backend {BACKEND_LIBRARY} (looked at {looked}); build it with "
                       "`make runtime` (CMake option AOTPACK_BUILD_TRITON_BACKEND, on by default)")
