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
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
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
        logging.disable(previous)


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
