"""Where the C++ runtime's files are: libaotpack, aotpack-run, the headers and the CMake package.

One layout, `<prefix>/{bin,lib,include}` with the CMake package in `<prefix>/lib/cmake/aotpack`, made by
`cmake --install` of runtime_cpp. A wheel installs it with the Python package itself as the prefix
(site-packages/aotpack, as torch and pybind11 ship their libraries and CMake files). A source checkout
(the editable install of `make setup`) has no installed prefix; there the runtime is the build tree
build/runtime, which is a CMake package too (runtime_cpp exports its targets there).

Nothing here imports torch or numpy, so `aotpack --cmake-dir` and `aotpack.cmake_prefix_path` are cheap.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import __version__
from .errors import AotpackError

# The installed prefix: the package folder (a wheel); in a source checkout, the repository root, which has
# no lib/ or bin/ of its own, so every lookup there falls through to the build tree.
PACKAGE_DIR = Path(__file__).resolve().parent
BUILD_TREE = PACKAGE_DIR / "build" / "runtime"
SOURCE_INCLUDE = PACKAGE_DIR / "runtime_cpp" / "include"

# The file a loader looks for: the library's SONAME, libaotpack.so.<major> (runtime_cpp/CMakeLists.txt).
LIBRARY_NAME = f"libaotpack.so.{__version__.split('.')[0]}"
CONFIG_FILE = "aotpackConfig.cmake"


class RuntimeFilesNotFound(AotpackError):
    pass


def library_candidates() -> list[Path]:
    """Where libaotpack is looked for, in order: the installed package, an install into this environment's
    prefix (`cmake --install build/runtime --prefix $VIRTUAL_ENV`), the source checkout's build tree."""
    return [PACKAGE_DIR / "lib" / LIBRARY_NAME, Path(sys.prefix) / "lib" / LIBRARY_NAME, BUILD_TREE / LIBRARY_NAME]


def tool_candidates() -> list[Path]:
    """Where the aotpack-run executable is looked for, in the same order as the library."""
    return [PACKAGE_DIR / "bin" / "aotpack-run", BUILD_TREE / "aotpack-run"]


def cmake_dir_candidates() -> list[Path]:
    """Folders that may hold aotpackConfig.cmake: the installed package's, then the build tree's."""
    return [PACKAGE_DIR / "lib" / "cmake" / "aotpack", BUILD_TREE]


def include_dir() -> Path:
    """The folder of aotpack.h, aotpack.hpp and aotpack_kernel_abi.h (installed, else the sources')."""
    installed = PACKAGE_DIR / "include"
    return installed if (installed / "aotpack.h").is_file() else SOURCE_INCLUDE


def first_existing(candidates: list[Path], what: str, marker: str | None = None) -> Path:
    """The first candidate that exists (a folder: that holds `marker`), else an error listing them all."""
    for path in candidates:
        if (path / marker).is_file() if marker else path.is_file():
            return path
    looked = ", ".join(str(p) for p in candidates)
    raise RuntimeFilesNotFound(
        f"cannot find {what} (looked at {looked}); install aotpack with `pip install .` (a wheel with the "
        "runtime), or in a source checkout build the runtime with `make setup` (or `cmake -S runtime_cpp -B "
        "build/runtime && cmake --build build/runtime`)"
    )


def cmake_dir() -> Path:
    """The folder of aotpackConfig.cmake: give it as CMAKE_PREFIX_PATH or aotpack_DIR to find_package(aotpack)."""
    return first_existing(cmake_dir_candidates(), f"the aotpack CMake package, {CONFIG_FILE}", CONFIG_FILE)


def tool_path() -> Path:
    """The aotpack-run executable."""
    return first_existing(tool_candidates(), "the aotpack-run tool")
