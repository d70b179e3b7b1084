"""Misuse the API forbids is an error, not a crash or a wrong result: a session used by two threads at once,
closed objects used again, and many sessions on many threads (the contract the misuse check must not cost)."""

from __future__ import annotations

import subprocess
import threading
import time

import numpy as np
import pytest


def concurrency_test(runtime_build, *args, timeout=300):
    return subprocess.run(
        [str(runtime_build / "aotpack-concurrency-test"), *map(str, args)],
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def test_a_second_thread_on_a_session_gets_an_error_not_a_mixed_result(runtime_build, threads_package):
    """Two threads released together on one session, 12 times: one run wins (its outputs exact), the other
    call is refused with the in-use error. The threads kernel sleeps 2 ms per element, so the calls overlap."""
    result = concurrency_test(runtime_build, "race", threads_package, 12, 40, 25)
    assert result.returncode == 0, result.stdout + result.stderr
    refused = int(result.stdout.split(", ")[1].split()[0])
    assert refused >= 6, result.stdout  # most rounds overlap; each such round was checked bit for bit


def test_sessions_on_many_threads_match_serial_runs(runtime_build, embed_package):
    result = concurrency_test(runtime_build, "sessions", embed_package, 4, 100)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "sessions: 4 threads x 100 runs, 400 runs compared, 0 mismatches"


def test_python_sees_the_in_use_error(rt, threads_package):
    session = rt.Model(threads_package).session()
    x = np.arange(60, dtype=np.float32)
    errors: list[Exception] = []
    done = threading.Event()

    def long_runs():
        # 60 chunks of 2 ms: 120 ms inside the runtime with the GIL released; retried while the main thread's
        # short run holds the session (the same error, seen from this side)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                session.run([x])
                break
            except rt.AotpackError as e:
                errors.append(e)
                time.sleep(0.001)
        done.set()

    worker = threading.Thread(target=long_runs)
    worker.start()
    while not done.is_set():
        try:
            session.run([x[:5]])
            time.sleep(0.002)  # a window for the worker to get in
        except rt.AotpackError as e:
            errors.append(e)
    worker.join()
    assert errors, "no call overlapped another"
    e = errors[0]
    assert e.code == rt.StatusCode.INVALID_ARGUMENT
    assert str(e).startswith("aotpack_session_run was called while another thread is using this session")
    y, _ = session.run([x])  # the session is fine afterwards
    np.testing.assert_array_equal(y, 2 * x + 1)


def test_closed_model_and_session(rt, mlp_package):
    model = rt.Model(mlp_package)
    session = model.session()
    model.close()
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    first = session.run([x])[0]  # the session's reference keeps the model
    with pytest.raises(rt.AotpackError, match=r"the model is closed \(Model.close\(\)\)"):
        model.session()
    session.close()
    with pytest.raises(rt.AotpackError, match=r"the session is closed \(Session.close\(\)\); make a new one"):
        session.run([x])
    np.testing.assert_array_equal(rt.Model(mlp_package).session().run([x])[0], first)
