"""Files of the export cache (compiled kernels, tuning times), written whole or not at all.

Exports may run side by side and share the cache folder (AOTPACK_CACHE_DIR): a test suite's workers, a
benchmark's variants, a build farm. Each writer fills a partial file of its own (named after its process and
thread) and renames it over the target, which is atomic within a folder; a reader sees the old file or the new
one, and two writers of the same entry (the same bytes) never move each other's partial file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_cache_file(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    if isinstance(data, str):
        part.write_text(data)
    else:
        part.write_bytes(data)
    os.replace(part, path)
