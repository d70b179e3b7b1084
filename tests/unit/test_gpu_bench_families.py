"""scripts/gpu_bench.py's GPU time of a call from its activities: kernels apart from copies and memsets, and the
kernels' time per family (by the plan's step order, else the package's kernel names), averaged over the calls
profiled, the markdown table of it, and the child process that measures it (no GPU needed)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import gpu_bench  # the scripts folder is not a package: found through sys.path above


def test_kernel_time_is_split_by_family_and_averaged_over_the_calls():
    events = [("t_mm", 30.0), ("t_att", 12.0), ("t_mm", 18.0), ("Memset (Device)", 1.0),
              ("Memcpy DtoH (Device -> Pinned)", 4.0), ("t_unknown", 2.0)] * 2  # two calls
    # the plan has three steps, so the calls' four kernels each cannot be placed by position: by name
    families = gpu_bench.Families({"t_mm": "matmul", "t_att": "attention"}, ("matmul", "attention", "matmul"))
    times = gpu_bench.gpu_times(events, runs=2, families=families)
    assert times["kernel_ms"] == 0.062 and times["gpu_ms"] == 0.067 and times["dtoh_copy_ms"] == 0.004
    assert times["kernels"] == 4 and times["families_by"] == "kernel name"
    assert times["family_ms"] == {"matmul": 0.048, "attention": 0.012, "other": 0.002}
    assert list(times["family_ms"]) == ["matmul", "attention", "other"]  # largest first
    assert times["unlisted_kernels_ms"] == {"t_unknown": 0.002}  # what "other" holds, by name
    assert "family_ms" not in gpu_bench.gpu_times(events, runs=2)


def test_a_run_of_the_plans_kernel_count_takes_the_families_from_the_steps_order():
    # CUPTI named the second step's kernel after another package's (t_stale): its position says attention
    events = [("t_mm", 30.0), ("t_stale", 12.0), ("Memset (Device)", 1.0), ("t_row", 3.0)] * 3
    families = gpu_bench.Families({"t_mm": "matmul", "t_att": "attention", "t_row": "row"},
                                  ("matmul", "attention", "row"))
    times = gpu_bench.gpu_times(events, runs=3, families=families)
    assert times["families_by"] == "launch order" and times["kernels"] == 3
    assert times["family_ms"] == {"matmul": 0.03, "attention": 0.012, "row": 0.003}
    assert times["unlisted_kernels_ms"] == {"t_stale": 0.012}


def test_the_family_table_lists_every_point_with_its_families_largest_first():
    summary = {"models": [{"label": "GPT-2", "points": [
        {"seq": 1, "aotpack_family_ms": {"matmul": 0.2, "row": 0.05}},
        {"seq": 2048, "aotpack_family_ms": {"matmul": 1.1, "attention": 0.3, "row": 0.1}}]}]}
    lines = gpu_bench.family_table(summary)
    assert lines[3] == "| model | seq | matmul | attention | row |"
    assert lines[5] == "| GPT-2 | 1 | 0.200 | - | 0.050 |" and lines[6] == "|  | 2048 | 1.100 | 0.300 | 0.100 |"
    assert gpu_bench.family_table({"models": [{"label": "x", "points": [{"seq": 1}]}]}) == []


def test_kernel_times_come_from_a_child_process_by_seq(monkeypatch, tmp_path):
    # The child's last KERNEL_TIMES line, keyed by seq (JSON's string keys back to ints); the child gets the model,
    # the package and the seqs (a stand-in for kernel_times: no GPU here)
    child = ("import json, sys; name, package, seqs = sys.argv[2:5]; "
             "print('KERNEL_TIMES ' + json.dumps({s: {'aotpack_kernel_ms': 0.25 * int(s), 'of': [name, package]} "
             "for s in seqs.split(',')}))")
    monkeypatch.setattr(gpu_bench, "KERNEL_TIMES_CODE", child)
    times, failed = gpu_bench.kernel_times_in_child("gpt2", tmp_path / "p.aotpack", (1, 128))
    assert failed is None
    assert times == {1: {"aotpack_kernel_ms": 0.25, "of": ["gpt2", str(tmp_path / "p.aotpack")]},
                     128: {"aotpack_kernel_ms": 32.0, "of": ["gpt2", str(tmp_path / "p.aotpack")]}}


def test_a_child_that_fails_gives_no_kernel_times_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_bench, "KERNEL_TIMES_CODE", "import sys; sys.exit('the package has no CUDA kernels')")
    times, failed = gpu_bench.kernel_times_in_child("gpt2", tmp_path / "p.aotpack", (1,))
    assert times == {}
    assert failed.startswith("kernel times failed (rc 1)") and "the package has no CUDA kernels" in failed
