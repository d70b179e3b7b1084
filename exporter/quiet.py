"""Silencing torch while it traces: its warnings and logs (draft-export banners, deprecation notices) and the
partial graph it prints to stderr when export fails would bury the one message aotpack prints about the
user's model. What the model itself prints still comes through."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_torch() -> Iterator[None]:
    # Raise the level of torch's console handlers only: logging.disable() would also starve the in-memory
    # handler draft_export reads its report from (with torch 2.11 the report then comes back empty).
    handlers = _torch_console_handlers()
    levels = [h.level for h in handlers]
    for handler in handlers:
        handler.setLevel(logging.ERROR)
    stderr = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(stderr):
            for category in (FutureWarning, DeprecationWarning, UserWarning):
                warnings.filterwarnings("ignore", category=category, module=r"(torch|copyreg)(\.|$)")
            yield
    except BaseException as e:
        sys.stderr.write(_without_graph_dumps(stderr.getvalue(), e))
        raise
    else:
        sys.stderr.write(stderr.getvalue())
    finally:
        for handler, level in zip(handlers, levels):
            handler.setLevel(level)


def _torch_console_handlers() -> list[logging.Handler]:
    consoles = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    found: list[logging.Handler] = []
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or not (name == "torch" or name.startswith("torch.")):
            continue
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) in consoles:
                found.append(handler)
    return found


def _without_graph_dumps(text: str, exc: BaseException) -> str:
    # torch.export prints `e.partial_fx_graph` to stderr before re-raising (torch/export/_trace.py).
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        graph = getattr(current, "partial_fx_graph", None)
        if graph:
            text = text.replace(f"{graph}\n", "").replace(str(graph), "")
        current = current.__cause__ or current.__context__
    return text
