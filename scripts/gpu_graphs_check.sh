#!/usr/bin/env bash
# Issue 11 on a GPU machine, in under 10 minutes: builds the runtime, runs the CUDA-graph, allocation and
# device-I/O GPU tests, then the latency benchmark (scripts/gpu_bench.py), everything written under OUT.
#
#   scripts/gpu_graphs_check.sh OUT [BENCH_BUDGET_S]      # PYTHON=... to choose the interpreter (python3)
#
#   OUT/build.log, OUT/gpu_tests.log, OUT/gpu_tests.xml   the build and the tests (-rA: every test's outcome)
#   OUT/bench/bench_gpu.json, bench_gpu.md, *.png, *.log  the benchmark (see scripts/gpu_bench.py)
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
OUT=${1:?usage: scripts/gpu_graphs_check.sh OUT [BENCH_BUDGET_S]}
BUDGET=${2:-300}
PY=${PYTHON:-python3}
mkdir -p "$OUT/site" "$OUT/bench"
OUT=$(cd "$OUT" && pwd)
ln -sfn "$REPO" "$OUT/site/aotpack"
export PYTHONPATH="$OUT/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
START=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/device.txt"
(cmake -S runtime_cpp -B build/runtime -DCMAKE_BUILD_TYPE=Release && cmake --build build/runtime -j"$(nproc)") \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
export AOTPACK_RUNTIME_LIB="$REPO/build/runtime/libaotpack.so"
echo "== built $(( $(date +%s) - START )) s"
XDIST=$($PY -c "import xdist" 2>/dev/null && echo "-n 6")  # parallel exports where pytest-xdist is there
AOTPACK_COMPILE_JOBS=2 timeout "${GPU_TEST_TIMEOUT:-150}" $PY -m pytest -q -rA -p no:cacheprovider $XDIST \
  tests/gpu/test_gpu_graphs.py tests/gpu/test_gpu_allocations.py tests/gpu/test_gpu_device_io.py \
  --junitxml="$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1
echo "== GPU tests rc $? at $(( $(date +%s) - START )) s"; grep -E "^(PASSED|FAILED|ERROR|SKIPPED)" "$OUT/gpu_tests.log" | cut -c1-200; tail -2 "$OUT/gpu_tests.log"
timeout "${GPU_BENCH_TIMEOUT:-$(( BUDGET + 70 ))}" $PY scripts/gpu_bench.py "$OUT/bench" --budget-s "$BUDGET" \
  > "$OUT/bench/bench.log" 2>&1
echo "== benchmark rc $? at $(( $(date +%s) - START )) s"
cat "$OUT/bench/bench_gpu.md" 2>/dev/null || tail -40 "$OUT/bench/bench.log"
