"""scripts/gpu_clock.py: nvidia-smi's samples of the SM clock and power beside a benchmark, summarised (no GPU
needed: a stand-in nvidia-smi prints what the real one does), and gpu_bench's line about them."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import gpu_bench  # the scripts folder is not a package: found through sys.path above
import gpu_clock

SAMPLES = """1980, 120.41, 0x0000000000000001
1755, 698.10, 0x0000000000000004
1710, 700.02, 0x0000000000000004
[N/A], [N/A], [N/A]
1740, 69
"""


def test_samples_are_summarised_and_unreadable_lines_skipped():
    summary = gpu_clock.parse_samples(SAMPLES)
    assert summary == {"samples": 3, "sm_mhz_median": 1755, "sm_mhz_min": 1710, "sm_mhz_max": 1980,
                       "power_w_max": 700.02, "throttle_reasons": ["0x0000000000000001", "0x0000000000000004"]}
    assert gpu_clock.parse_samples("") == {"samples": 0}


def test_the_sampler_runs_nvidia_smi_beside_its_body(tmp_path, monkeypatch):
    args = tmp_path / "args.txt"
    tool = tmp_path / "nvidia-smi"  # prints a sample every 10 ms, as `-lms` makes the real one do, until stopped
    tool.write_text(f"#!/bin/sh\necho \"$@\" > {args}\nwhile true; do echo '1755, 650.5, 0x4'; sleep 0.01; done\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with gpu_clock.GpuClock("GPU-1234") as clock:
        time.sleep(0.3)
    summary = clock.summary()
    assert summary["samples"] >= 3 and summary["sm_mhz_median"] == 1755 and summary["power_w_max"] == 650.5, summary
    assert args.read_text().split() == [f"--query-gpu={gpu_clock.QUERY}", "--format=csv,noheader,nounits",
                                        f"--loop-ms={gpu_clock.INTERVAL_MS}", "--id=GPU-1234"]


def test_what_nvidia_smi_says_instead_of_samples_is_kept(tmp_path, monkeypatch):
    tool = tmp_path / "nvidia-smi"
    tool.write_text('#!/bin/sh\necho \'Field "clocks_throttle_reasons.active" is not a valid field to query.\' >&2\nexit 2\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with gpu_clock.GpuClock() as clock:
        time.sleep(0.1)
    assert clock.summary() == {"samples": 0, "error": 'nvidia-smi: Field "clocks_throttle_reasons.active" is not a '
                                                      'valid field to query.'}


def test_without_nvidia_smi_the_summary_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with gpu_clock.GpuClock() as clock:
        pass
    assert clock.summary() == {"samples": 0, "error": "no nvidia-smi on PATH"}


def test_the_benchmark_reports_each_points_clock():
    clock = {"samples": 40, "sm_mhz_median": 1755, "sm_mhz_min": 1650, "sm_mhz_max": 1980, "power_w_max": 699.6,
             "throttle_reasons": ["0x4"]}
    summary = {"models": [{"label": "BERT", "points": [{"seq": 1, "gpu_clock": {"samples": 0}},
                                                       {"seq": 2048, "gpu_clock": clock}]},
                          {"label": "GPT-2", "points": [{"seq": 1}]}]}
    (line,) = [line for line in gpu_bench.clock_lines(summary) if line]
    assert "BERT 1755 (1650, 700 W) at seq 2048" in line and "GPT-2" not in line, line
    assert gpu_bench.clock_lines({"models": [{"label": "GPT-2", "points": [{"seq": 1}]}]}) == []
