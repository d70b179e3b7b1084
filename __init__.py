"""aotpack: export a PyTorch model once, run it from C++ with no Python and no libtorch.

    import aotpack
    result = aotpack.export(model, (x,), "model.aotpack", dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}})

`aotpack.export` is api.export; it is imported on first use, so `from aotpack import runtime` (the C++
runtime through ctypes) does not import torch.

`aotpack.cmake_prefix_path` is the folder of the runtime's CMake package (aotpackConfig.cmake), for C++
builds: `cmake -DCMAKE_PREFIX_PATH="$(python -c 'import aotpack; print(aotpack.cmake_prefix_path)')"`; the
command `aotpack --cmake-dir` prints the same.
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("export", "ExportResult"):
        from . import api

        return getattr(api, name)
    if name == "cmake_prefix_path":
        from . import runtime_files

        return str(runtime_files.cmake_dir())
    raise AttributeError(f"module 'aotpack' has no attribute {name!r}")
