"""aotpack: export a PyTorch model once, run it from C++ with no Python and no libtorch.

    import aotpack
    result = aotpack.export(model, (x,), "model.aotpack", dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}})

`aotpack.export` is api.export; it is imported on first use, so `from aotpack import runtime` (the C++
runtime through ctypes) does not import torch.
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("export", "ExportResult"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'aotpack' has no attribute {name!r}")
