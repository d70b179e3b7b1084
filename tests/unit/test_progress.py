"""Export progress: stages announced when slow, heartbeats while silent, counters, and the summary."""

from __future__ import annotations

import time

from aotpack import progress


def test_stages_heartbeats_counters_and_summary():
    lines: list[str] = []
    report = progress.Progress(lines.append, heartbeat=0.2)
    with progress.reporting(report):
        with progress.current().stage("quick"):
            pass
        with progress.current().stage("capture", "torch.export", heartbeat=True):
            time.sleep(progress.ANNOUNCE_SECONDS + 0.5)
        with progress.current().stage("compile"):
            for i in range(1, 4):
                progress.current().count(i, 3, "kernels compiled")
    assert lines[0].startswith("  quick: ") and lines[0].endswith(" s")  # fast: its time only
    assert lines[1] == "  capture: torch.export ..."
    assert any(line.startswith("  capture: still working (") for line in lines)
    assert lines.index("  compile ...") < lines.index("    3 of 3 kernels compiled")  # announced before its lines
    assert list(report.seconds) == ["quick", "capture", "compile"]
    assert report.seconds["capture"] >= progress.ANNOUNCE_SECONDS
    assert report.summary().startswith("quick 0.0 s, capture ")


def test_quiet_progress_keeps_times_and_prints_nothing():
    with progress.ensure() as report:
        with progress.current().stage("lower"):
            pass
    assert "lower" in report.seconds
    assert progress.current() is not report  # nothing reporting outside the block
