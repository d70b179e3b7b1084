"""The export cache's files are written whole by writers running side by side (lowering/backends/cache_file.py):
exports in parallel processes once raced on one fixed partial file name and failed with FileNotFoundError (H200,
session 21: GPU tests and a benchmark's exports compiling the same kernel at once)."""

from __future__ import annotations

import multiprocessing
import threading

from aotpack.lowering.backends.cache_file import write_cache_file


def _write_many(path: str, tag: int) -> None:
    from pathlib import Path

    for i in range(200):
        write_cache_file(Path(path), bytes([tag]) * 65536 + str(i).encode())


def test_writers_in_threads_and_processes_never_collide_and_leave_a_whole_file(tmp_path):
    target = tmp_path / "cuda" / "kernel.cubin"
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_write_many, args=(str(target), tag)) for tag in (1, 2)]
    failures: list[BaseException] = []

    def in_thread(tag: int) -> None:
        try:
            _write_many(str(target), tag)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            failures.append(e)

    threads = [threading.Thread(target=in_thread, args=(tag,)) for tag in (3, 4)]
    for worker in (*processes, *threads):
        worker.start()
    for worker in (*processes, *threads):
        worker.join()
    assert all(p.exitcode == 0 for p in processes) and not failures, ([p.exitcode for p in processes], failures)
    data = target.read_bytes()
    tag = data[0]
    assert tag in (1, 2, 3, 4) and data[:65536] == bytes([tag]) * 65536 and data[65536:] == b"199"
    assert [p.name for p in target.parent.iterdir()] == ["kernel.cubin"]  # no partial file left behind


def test_text_is_written_too(tmp_path):
    write_cache_file(tmp_path / "module.py", "x = 1\n")
    assert (tmp_path / "module.py").read_text() == "x = 1\n"
