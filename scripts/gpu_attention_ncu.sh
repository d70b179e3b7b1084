#!/usr/bin/env bash
# The attention kernel under Nsight Compute twice: as scripts/gpu_attention_bench.py launches it alone and as
# BERT-base's package launches it at batch 8 x 2048 with the benchmark's padding. Sessions 23-30 timed the model's
# kernel 12-18% slower than the benchmark's with the same source, blocks and padding; this puts the two side by
# side (duration, SM clock, registers, occupancy, issue slots, warp stall reasons, pipe use) and says what bounds
# the kernel. First run in session 34 (H100): the two launches took the same time (docs/performance.md, "The
# padding scan, 16 key blocks a step").
#
#   scripts/gpu_attention_ncu.sh OUT_DIR [PACKAGE]    # on the GPU machine; ~3 minutes, most of it BERT's export
#
# PACKAGE, where given and present, is BERT's package exported as below beforehand (so that the export can overlap
# other work on the machine); otherwise the script exports it.
# Uses the runtime in build/runtime (scripts/gpu_check.sh builds it) and ncu from PATH. OUT_DIR gets the two
# reports (ncu_bench.txt, ncu_model.txt) and a summary of their key lines (ncu_summary.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu_attention_ncu.sh OUT_DIR [PACKAGE]}
PY=${PYTHON:-python3}
mkdir -p "$OUT" build/gpu_check/site
ln -sfn "$PWD" build/gpu_check/site/aotpack
export PYTHONPATH="$PWD/build/gpu_check/site:$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export AOTPACK_RUNTIME_LIB="$PWD/build/runtime/libaotpack.so" AOTPACK_EXAMPLE_SIZE=full
command -v ncu > /dev/null || { echo "no ncu on PATH: Nsight Compute is needed"; exit 2; }
PACKAGE=${2:-${TMPDIR:-/tmp}/bert_attention_ncu.aotpack}
SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats
          --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats)

# BERT's package, untuned (the table's blocks, which the benchmark's --chosen-only times), exported meanwhile
[ -f "$PACKAGE" ] && echo "export rc 0 (given: $PACKAGE)" > "$OUT/export.log" || ($PY -m aotpack.cli export examples/bert/model.py -o "$PACKAGE" --dynamic batch=1..8 \
   --dynamic seq=1..2048 --dtype bf16 --target cuda --no-tune > "$OUT/export.log" 2>&1; echo "export rc $?" >> "$OUT/export.log") &

# The benchmark's kernel: its first launch is the program run through Triton's JIT, specialised on the sizes;
# the second is the kernel compiled as packages compile it, the one timed.
NAME=$($PY scripts/gpu_attention_bench.py 2048 bert_example_long_b8_d64 --names | awk '{print $2}')
timeout 240 ncu --clock-control none "${SECTIONS[@]}" -k "regex:^${NAME}$" --launch-skip 1 --launch-count 1 \
  $PY scripts/gpu_attention_bench.py 2048 bert_example_long_b8_d64 --chosen-only > "$OUT/ncu_bench.txt" 2>&1
echo "ncu bench (kernel $NAME) rc $?"
wait
tail -1 "$OUT/export.log"

# The model's: one run without graphs or programmatic dependent launch (kernels one by one, as ncu replays them),
# the benchmark's padded inputs (scripts/gpu_acceptance.py make_inputs); the first layer's attention of the
# second run is profiled.
NAMES=$($PY - "$PACKAGE" <<'PY'
import json, sys, zipfile
kernels = json.loads(zipfile.ZipFile(sys.argv[1]).read("program.json"))["cuda"]["kernels"]
print("|".join(sorted({k["name"] for k in kernels if k["family"] == "attention"})))
PY
)
LAYERS=12
timeout 240 ncu --clock-control none "${SECTIONS[@]}" -k "regex:^(${NAMES})$" --launch-skip $LAYERS --launch-count 1 \
  $PY - "$PACKAGE" > "$OUT/ncu_model.txt" 2>&1 <<'PY'
import sys
from pathlib import Path
import torch
from aotpack import runtime
from aotpack.verification import to_numpy
from gpu_acceptance import example_module, make_inputs
module = example_module(Path("examples/bert/model.py").resolve())
inputs = [to_numpy(x) for x in make_inputs("bert", module, 8, 2048)]
session = runtime.Model(sys.argv[1]).session(device="cuda", cuda_graphs=False, cuda_pdl=False)
for _ in range(2):
    session.run(inputs)
print("ran the model twice")
PY
echo "ncu model (kernels $NAMES) rc $?"

KEYS="Duration|SM Frequency|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Executed Ipc Active|Stall|Warp Cycles Per Issued|Block Limit|Compute \(SM\) Throughput|Memory Throughput"
for f in bench model; do
  echo "== $f"; grep -E "$KEYS" "$OUT/ncu_$f.txt" | sed 's/  */ /g' | head -40
done | tee "$OUT/ncu_summary.txt"
