"""Where in the user's model a graph node came from, for error messages."""

from __future__ import annotations

import re
from pathlib import Path

import torch.fx

from ..errors import UnsupportedError
from ..exporter.frames import portable_path
from .registry import op_name

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n\s*(?P<code>[^\n]*)')


def _user_frame(node: torch.fx.Node) -> tuple[str, int, str] | None:
    """The innermost frame of the node's stack trace that is not inside torch itself."""
    trace = node.meta.get("stack_trace") or ""
    frames = [m for m in _FRAME.finditer(trace) if "/torch/" not in m["file"]]
    if not frames:
        return None
    last = frames[-1]
    return last["file"], int(last["line"]), last["code"].strip()


def source_line(node: torch.fx.Node, model_dir: Path | None = None) -> str:
    """`modeling_gpt2.py:98 (code)` with the file named as portable_path() does: these lines go into kernel
    error messages inside the package, so they must not carry this machine's paths."""
    frame = _user_frame(node)
    if frame is None:
        return f"graph node {node.name}"
    file, line, code = frame
    file = portable_path(file, model_dir)
    return f"{file}:{line} ({code})" if code else f"{file}:{line}"


def unsupported_ops_error(nodes: list[torch.fx.Node], model_dir: Path | None = None) -> UnsupportedError:
    """One error listing every unsupported op with the lines that use it, so the user sees all at once."""
    by_op: dict[str, list[str]] = {}
    for node in nodes:
        by_op.setdefault(op_name(node.target), []).append(source_line(node, model_dir))
    lines = [f"  {op}: used at {', '.join(dict.fromkeys(where))}" for op, where in sorted(by_op.items())]
    return UnsupportedError(
        f"the model uses {len(by_op)} op(s) aotpack cannot lower yet:\n" + "\n".join(lines)
        + "\nRewrite those lines with supported ops, or open an issue asking for these ops."
    )
