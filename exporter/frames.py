"""Finding the user's own line in a traceback or a torch stack, so errors point at model code, not torch."""

from __future__ import annotations

import linecache
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import torch

_TORCH_DIR = Path(torch.__file__).resolve().parent
_AOTPACK_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class UserFrame:
    path: Path
    line: int
    code: str  # the source line's text, stripped; "" when it cannot be read

    def where(self) -> str:
        return f"{short_path(str(self.path))}:{self.line}"

    def describe(self) -> str:
        """`model.py:10 (for t in range(x.shape[1]):)`, the form every message uses."""
        return f"{self.where()} ({self.code})" if self.code else self.where()


def display_path(path: str | os.PathLike[str]) -> str:
    """The path as short as stays unambiguous: relative to the working directory when under it."""
    path = Path(path)
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)
    return str(path) if rel.startswith("..") else rel


class UserFiles:
    """Which source files count as the user's: the model file's folder (siblings it imports included), never
    torch itself even if a user keeps their model next to a torch checkout."""

    def __init__(self, model_file: Path) -> None:
        self.model_file = model_file.resolve()
        self.folder = self.model_file.parent

    def __contains__(self, filename: object) -> bool:
        if not isinstance(filename, str) or filename.startswith("<"):
            return False
        try:
            path = Path(filename).resolve()
        except OSError:
            return False
        if path == self.model_file:
            return True
        if path.is_relative_to(_TORCH_DIR) or "site-packages" in path.parts:
            return False
        return path.is_relative_to(self.folder)

    def frame(self, filename: str, line: int, code: str | None = None) -> UserFrame:
        if not code:
            code = linecache.getline(filename, line)
        return UserFrame(Path(filename).resolve(), line, (code or "").strip())


def innermost_user_frame(exc: BaseException, files: UserFiles) -> UserFrame | None:
    """The deepest frame in the user's files along the exception's traceback and its causes: deepest is where
    the offending code is (a helper in layers.py rather than the forward() that called it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _innermost(current.__traceback__, files)
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return None


def is_library_file(filename: str) -> bool:
    """A source file of a library the model is built with: neither torch's nor aotpack's (nor a generated one)."""
    if filename.startswith("<"):
        return False
    path = Path(filename)
    ours = path.is_relative_to(_AOTPACK_DIR) and "site-packages" not in path.parts  # (a venv may sit inside)
    return not (path.is_relative_to(_TORCH_DIR) or ours)


def library_location(exc: BaseException, files: UserFiles | None = None) -> str | None:
    """`transformers/models/gpt2/modeling_gpt2.py:685 (code)`: the deepest frame outside torch and aotpack, for
    an error raised inside a library the model is built with; None where there is none, or where that frame
    is in the user's own `files` (their line is shown already)."""
    found = None
    for summary in traceback.extract_tb(exc.__traceback__):
        if summary.lineno is None or not is_library_file(summary.filename):
            continue
        found = summary
    if found is None or (files is not None and found.filename in files):
        return None
    code = (found.line or "").strip()
    shown = short_path(found.filename)
    return f"{shown}:{found.lineno} ({code})" if code else f"{shown}:{found.lineno}"


def portable_path(filename: str, model_dir: Path | None = None) -> str:
    """A source file named without anything of this machine, for what goes into a package: relative to the
    model's folder when under it (`model.py`, `layers.py`), else to the import root that holds it
    (`transformers/models/gpt2/modeling_gpt2.py`), else its name alone. Two checkouts or machines with the same
    toolchain then write the same bytes."""
    path = Path(filename)
    if not path.is_absolute():
        return path.as_posix()
    if model_dir is not None and path.is_relative_to(model_dir):
        return path.relative_to(model_dir).as_posix()
    roots = [Path(p) for p in sys.path if p and Path(p).is_absolute() and path.is_relative_to(p)]
    if "site-packages" in path.parts:
        return short_path(filename)
    if roots:
        return path.relative_to(max(roots, key=lambda r: len(r.parts))).as_posix()
    return path.name


def short_path(filename: str) -> str:
    """An installed library's file from its package down (`transformers/pytorch_utils.py`), else display_path."""
    parts = Path(filename).parts
    if "site-packages" in parts:
        return "/".join(parts[len(parts) - 1 - parts[::-1].index("site-packages") + 1:])
    return display_path(filename)


def _innermost(tb: TracebackType | None, files: UserFiles) -> UserFrame | None:
    found = None
    for summary in traceback.extract_tb(tb):
        if summary.lineno is not None and summary.filename in files:
            found = files.frame(summary.filename, summary.lineno, summary.line)
    return found


def one_line(message: str, limit: int = 300) -> str:
    """The first non-empty line of a (torch) exception message, cut to a readable length."""
    for line in str(message).splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""
