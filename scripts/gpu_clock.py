"""The GPU's SM clock and power while a benchmark runs, sampled by nvidia-smi beside it.

    with GpuClock() as clock:
        ...timed work...
    clock.summary()  # {"samples": 41, "sm_mhz_median": 1755, "sm_mhz_min": 1650, "power_w_max": 698.1, ...}

A kernel timed alone in a benchmark and the same kernel inside a model need not run at the same clock: a model's
large matrix products may draw the card to its power limit, under which it lowers its SM clock. Sessions 23-30
found BERT's attention kernel 12-18% slower in the model than in scripts/gpu_attention_bench.py with the same
source, blocks, shape and padding; these samples say whether two such timings ran at the same clock. nvidia-smi samples every
INTERVAL_MS at best; a timed series shorter than a few intervals gets few or no samples (summary says how many).
Where nvidia-smi is missing or fails, the summary says so instead of giving figures.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import Self  # Python 3.11+; annotations are not evaluated at run time here

INTERVAL_MS = 20
QUERY = "clocks.sm,power.draw,clocks_throttle_reasons.active"


def parse_samples(text: str) -> dict[str, Any]:
    """Summary of nvidia-smi's `--query-gpu=QUERY --format=csv,noheader,nounits` lines: the SM clock's median,
    minimum and maximum in MHz, the largest power draw in watts, and the throttle reasons' bit masks seen (0x4:
    the power cap; 0x20 and 0x40: thermal slowdowns; 0x1: the GPU idle)."""
    mhz, watts, reasons = [], [], set()
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3:
            continue
        try:
            mhz.append(int(float(fields[0])))
            watts.append(float(fields[1]))
        except ValueError:  # "[N/A]" or a partial line
            continue
        reasons.add(fields[2])
    if not mhz:
        return {"samples": 0}
    return {"samples": len(mhz), "sm_mhz_median": statistics.median(mhz), "sm_mhz_min": min(mhz),
            "sm_mhz_max": max(mhz), "power_w_max": max(watts), "throttle_reasons": sorted(reasons)}


def nvidia_smi_id(torch_index: int = 0) -> str:
    """nvidia-smi's name (-i) for torch's CUDA device `torch_index`: its UUID, which CUDA_VISIBLE_DEVICES does not
    renumber as it does indices; the index itself where torch gives no UUID."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(torch_index).uuid)
    except (ImportError, AttributeError, RuntimeError):
        return str(torch_index)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


class GpuClock:
    """A context manager that runs nvidia-smi's sampler for one device (`device`: nvidia-smi's -i, see
    nvidia_smi_id) while its body runs."""

    def __init__(self, device: str = "0"):
        self.device = device
        self._proc: subprocess.Popen | None = None
        self._file: IO[str] | None = None
        self._result: dict[str, Any] = {"samples": 0, "error": "not run"}

    def __enter__(self) -> Self:
        tool = shutil.which("nvidia-smi")
        if tool is None:
            self._result = {"samples": 0, "error": "no nvidia-smi on PATH"}
            return self
        self._file = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen(
            [tool, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", f"--loop-ms={INTERVAL_MS}", f"--id={self.device}"],
            stdout=self._file, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is None or self._file is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._file.seek(0)
        text = self._file.read()
        self._file.close()
        self._result = parse_samples(text)
        if not self._result["samples"]:  # nvidia-smi's complaint (a field this driver lacks, say), or none at all
            said = next((line.strip() for line in text.splitlines() if line.strip()), "")
            self._result["error"] = f"nvidia-smi: {said[:200]}" if said else "no samples: the body ran shorter than one interval"


    def summary(self) -> dict[str, Any]:
        return dict(self._result)
