"""The `aotpack-run` command a wheel puts on PATH: replaces itself with the native tool in the package.

The native executable lives in site-packages/aotpack/bin beside lib/, where its rpath ($ORIGIN/../lib) finds
libaotpack. A wheel's scripts folder is elsewhere (venv/bin, ~/.local/bin, /usr/local/bin), at no fixed
distance from site-packages, so the tool cannot sit there itself; the cmake and ninja wheels launch their
binaries the same way. exec keeps the tool's exit status, signals and output as they are.
"""

from __future__ import annotations

import os
import sys

from .runtime_files import RuntimeFilesNotFound, tool_path


def main() -> None:
    try:
        tool = tool_path()
    except RuntimeFilesNotFound as e:
        print(f"aotpack-run: {e}", file=sys.stderr)
        sys.exit(1)
    os.execv(tool, [sys.argv[0], *sys.argv[1:]])
