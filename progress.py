"""What a long export says while it works: each stage as it starts and its time when done, a heartbeat while a
stage runs long without a word, a counter for stages of many parts (n of N kernels), and a summary of the
times at the end. Stages anywhere in the pipeline report through `current()`, so the lowering needs no
callback threaded through it; `quiet` (the default outside the CLI) prints nothing but still keeps the times.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator

HEARTBEAT_SECONDS = 5.0


# A stage still running after this long is announced (fast ones print only their time when done).
ANNOUNCE_SECONDS = 0.5


class Progress:
    def __init__(self, echo: Callable[[str], None] | None = None, heartbeat: float = HEARTBEAT_SECONDS) -> None:
        self._echo = echo
        self._heartbeat = heartbeat
        self.seconds: dict[str, float] = {}  # stage -> time, in the order the stages ran
        self._count_shown = 0.0
        self._lock = threading.Lock()
        self._unannounced: list[str] = []  # start lines of running stages not printed yet

    def line(self, message: str) -> None:
        if self._echo is None:
            return
        with self._lock:
            self._flush_announcements()
            self._echo(f"  {message}")

    def _flush_announcements(self) -> None:
        for start in self._unannounced:
            self._echo(f"  {start}")
        self._unannounced.clear()

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = "", heartbeat: bool = False) -> Iterator[None]:
        """Times `name`. A stage running longer than ANNOUNCE_SECONDS (or printing anything) is announced as it
        runs; with `heartbeat`, a line every few seconds while it works in silence (torch.export can, for minutes)."""
        start = time.perf_counter()
        announcement = f"{name}{': ' + detail if detail else ''} ..."
        stop = threading.Event()
        watcher = None
        if self._echo is not None:
            with self._lock:
                self._unannounced.append(announcement)

            def watch() -> None:
                if stop.wait(ANNOUNCE_SECONDS):
                    return
                with self._lock:
                    self._flush_announcements()
                while heartbeat and not stop.wait(self._heartbeat):
                    self.line(f"{name}: still working ({time.perf_counter() - start:.0f} s)")

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
        try:
            yield
        finally:
            stop.set()
            if watcher is not None:
                watcher.join()
                with self._lock:
                    if announcement in self._unannounced:
                        self._unannounced.remove(announcement)
            elapsed = time.perf_counter() - start
            self.seconds[name] = self.seconds.get(name, 0.0) + elapsed
            self.line(f"{name}: {elapsed:.1f} s")

    def count(self, done: int, total: int, what: str) -> None:
        """`n of N what`, shown at most about once a second and always at the end."""
        now = time.perf_counter()
        if done == total or now - self._count_shown >= 1.0:
            self._count_shown = now
            self.line(f"  {done} of {total} {what}")

    def summary(self) -> str:
        return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.seconds.items())


_current: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("aotpack_progress", default=None)


def current() -> Progress:
    """The progress of the export running in this context (a quiet, throw-away one when none is)."""
    return _current.get() or Progress()


@contextlib.contextmanager
def ensure() -> Iterator[Progress]:
    """The export's progress if one is reporting, else a quiet one for the duration (whose times still count)."""
    active = _current.get()
    if active is not None:
        yield active
        return
    with reporting(Progress()) as fresh:
        yield fresh


@contextlib.contextmanager
def reporting(progress: Progress) -> Iterator[Progress]:
    token = _current.set(progress)
    try:
        yield progress
    finally:
        _current.reset(token)
