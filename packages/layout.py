"""The package layout, in one place: format name and version, member names, alignment.

docs/package-format.md describes the same layout for readers; runtime_cpp/src/package.cpp reads it.
"""

from __future__ import annotations

FORMAT_NAME = "aotpack"
FORMAT_VERSION = 1

MANIFEST = "manifest.json"
PROGRAM = "program.json"
WEIGHTS = "weights.safetensors"

# Member data starts on this boundary so the runtime can use weights and kernels in place from a mapping.
ALIGNMENT = 64
# Zip extra-field id of the padding record that aligns member data (any id the zip spec leaves free works).
PADDING_EXTRA_ID = 0xA0A0
# Members larger than this also carry the digests of their chunks of this size (docs/package-format.md,
# "manifest.json"), so that a reader can check one large member (the weights) on several threads at once.
DIGEST_CHUNK_BYTES = 16 << 20
# Fixed timestamp for every member: the same inputs must give a byte-identical package.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def cpu_library(isa: str) -> str:
    return f"cpu/{isa}/kernels.so"


def cpu_source(isa: str) -> str:
    return f"cpu/{isa}/kernels.cpp"


def cuda_kernels(arch: int) -> str:
    """Per-architecture launch metadata of the CUDA kernels (docs/package-format.md)."""
    return f"cuda/sm_{arch}/kernels.json"


def cuda_cubin(arch: int, kernel: str) -> str:
    return f"cuda/sm_{arch}/{kernel}.cubin"


CUDA_SOURCE = "cuda/kernels.py"  # the Triton source of every kernel, for audit (never loaded)
