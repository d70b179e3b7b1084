#!/usr/bin/env bash
# A runtime-side change checked on a GPU machine in one command (under its 10 minutes): builds this tree's
# runtime and an earlier one's, runs tests/gpu, and times the two runtimes against each other on an untuned
# GPT-2 export (scripts/runtime_ab.py: alternating processes, device I/O with graphs, outputs compared).
#
#   here:  mkdir -p ab && git archive REV runtime_cpp | tar -x -C ab     # the earlier runtime's sources (untracked,
#                                                                          # so they travel with the working tree)
#   there: scripts/gpu_runtime_check.sh ab "$OUT"                        # logs and the A/B's JSON into $OUT
#
# Delete ab/ afterwards. OLD_SOURCES_DIR "-" skips the earlier runtime and the A/B (the tests and the queued runs'
# timing alone, about 3 minutes less). Works without installing aotpack, as scripts/gpu_check.sh does.
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: scripts/gpu_runtime_check.sh OLD_SOURCES_DIR OUT_DIR}
OUT=${2:?usage: scripts/gpu_runtime_check.sh OLD_SOURCES_DIR OUT_DIR}
PY=${PYTHON:-python3}
mkdir -p "$OUT" build/gpu_check/site
ln -sfn "$PWD" build/gpu_check/site/aotpack
export PYTHONPATH="$PWD/build/gpu_check/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

build() {  # build <sources> <build dir> [cmake --build arguments]
  local log="$OUT/cmake_$(basename "$2").log"
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release > "$log" 2>&1 \
    && cmake --build "$2" -j"$(nproc)" "${@:3}" >> "$log" 2>&1 || echo "BUILD FAILED: $2 (see $log)"
}
build runtime_cpp build/runtime
[ "$OLD" = - ] || build "$OLD/runtime_cpp" build/runtime_ab --target aotpack
PACKAGE=${TMPDIR:-/tmp}/gpt2_ab.aotpack  # not under OUT_DIR: 250 MB that need not come back
export AOTPACK_RUNTIME_LIB="$PWD/build/runtime/libaotpack.so"

# the package for the A/B, exported while the tests run (untuned: the same kernels for both runtimes)
(AOTPACK_EXAMPLE_SIZE=full AOTPACK_COMPILE_JOBS=4 $PY -m aotpack.cli export examples/gpt2/model.py -o "$PACKAGE" \
   --dynamic batch=1..2 --dynamic seq=1..2048 --dtype bf16 --target cuda --no-tune > "$OUT/export.log" 2>&1
 echo "export rc $?" >> "$OUT/export.log") &
AOTPACK_COMPILE_JOBS=1 timeout "${GPU_TEST_TIMEOUT:-330}" $PY -m pytest -q -p no:logging -p no:cacheprovider \
  -n "${GPU_CHECK_JOBS:-8}" tests/gpu -rs -W ignore > "$OUT/gpu_tests.log" 2>&1
echo "== GPU tests (rc $?)"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -20; tail -3 "$OUT/gpu_tests.log"
wait
tail -1 "$OUT/export.log"
if [ "$OLD" != - ]; then
  echo "== runtime A/B ($OLD against this tree)"
  timeout "${AB_TIMEOUT:-180}" $PY scripts/runtime_ab.py "$PACKAGE" --model gpt2 --rounds 3 \
    --lib build/runtime_ab/libaotpack.so --lib build/runtime/libaotpack.so --out "$OUT/runtime_ab.json" \
    2>&1 | tee "$OUT/runtime_ab.log" | tail -4
fi

# Runs queued on a stream (aotpack_session_enqueue): their time a run next to a waited-for replay, then the same
# path under compute-sanitizer's memcheck (graphs captured, replayed and queued) where the image has it.
echo "== queued runs (aotpack-run --io device --queue)"
for seq in 1 128 2048; do
  timeout 120 build/runtime/aotpack-run "$PACKAGE" --device cuda --io device --sym batch=1 seq=$seq --repeat 50 \
    --queue 200 2>&1 | tail -1 | tee -a "$OUT/queued.log"
done
if command -v compute-sanitizer > /dev/null; then
  timeout 240 compute-sanitizer --tool memcheck build/runtime/aotpack-run "$PACKAGE" --device cuda --io device \
    --sym batch=1 seq=128 --repeat 2 --queue 4 > "$OUT/queued_memcheck.log" 2>&1
  echo "memcheck rc $?"; grep -E "ERROR SUMMARY" "$OUT/queued_memcheck.log"
fi
