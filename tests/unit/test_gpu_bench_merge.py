"""scripts/gpu_bench.py --docs OUT --peers-from PEERS: the compiled peers a benchmark run skipped for its time
budget are taken from a --peers-only run, marked, and every point judged again (no GPU needed)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import gpu_bench  # the scripts folder is not a package: found through sys.path above


def run_with_skipped_peers() -> dict:
    points = [{"model": "llama", "seq": seq, "aotpack_ms": ms, "aotpack_kernel_ms": ms - 0.05, "eager_ms": 10.0,
               "torch_compile_ms": "skipped: time budget", "torch_compile_graphs_ms": graphs}
              for seq, ms, graphs in ((1, 0.3, 1.2), (512, 0.64, "skipped: time budget"), (2048, 1.6, None))]
    for p in points:
        gpu_bench.judge_point(p)
    return {"models": [{"model": "llama", "label": "Llama", "points": points}]}


def test_skipped_peers_are_filled_marked_and_judged_again():
    summary = run_with_skipped_peers()
    before = summary["models"][0]["points"][1]
    assert before["best_peer_ms"] == 10.0 and before["beats_best_peer_by_20pct"]  # against eager alone
    peers = {"models": [{"model": "llama", "points": [
        {"seq": 1, "eager_ms": 11.0, "torch_compile_graphs_ms": 9.9, "torch_compile_ms": 3.1},
        {"seq": 512, "eager_ms": 11.0, "torch_compile_graphs_ms": 0.75, "torch_compile_ms": "failed: X"},
        {"seq": 2048, "eager_ms": 11.0, "torch_compile_graphs_ms": 2.4}]}]}
    assert gpu_bench.merge_peers(summary, peers, "peers_run") == 3
    one, mid, long = summary["models"][0]["points"]
    assert one["torch_compile_graphs_ms"] == 1.2 and one["torch_compile_ms"] == 3.1  # a time is never replaced
    assert one["peers_from"] == {"torch_compile_ms": "peers_run"}
    assert mid["torch_compile_graphs_ms"] == 0.75 and mid["torch_compile_ms"] == "skipped: time budget"
    assert mid["best_peer_ms"] == 0.75 and not mid["beats_best_peer_by_20pct"]  # 0.64 > 0.8 x 0.75
    assert long["vs_best_peer"] == round(1.6 / 2.4, 3)
    table = gpu_bench.markdown(summary)
    assert "| 0.750 † |" in table and "`peers_run`" in table


def test_a_peers_only_point_is_judged_without_aotpack():
    p = {"model": "llama", "seq": 1, "eager_ms": 10.0, "torch_compile_graphs_ms": 1.2}
    gpu_bench.judge_point(p)
    assert "vs_best_peer" not in p and "launch_limit_ms" not in p
