#!/usr/bin/env bash
# The runtime under sanitizers (gcc's; no clang needed):
#   asan   build/asan (ASan + UBSan): the C++ unit tests, then tests/runtime through the Python binding with
#          the sanitized library preloaded (leak detection off there: CPython itself never frees everything)
#   tsan   build/tsan (TSan): 16 threads x 1000 mixed-shape runs, one session each, bit-identical to serial runs,
#          and two threads racing on one session (the in-use check)
#   leaks  build/asan with LeakSanitizer: 10,000 runs, a new session every 100, failing calls included
# Each uses a package the runtime tests make (tests/runtime's embed and threads packages), written to build/.
#
#   scripts/sanitize.sh [asan|tsan|leaks|all]     (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-all}
PY=.venv/bin/python
PACKAGES=build/sanitize-packages

configure() {  # configure <dir> <sanitizers>
  cmake -S runtime_cpp -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAOTPACK_SANITIZE="$2" > /dev/null
  cmake --build "$1" -j2
}

packages() {  # the hand-made test packages, from tests/runtime/runtime_helpers.py
  mkdir -p "$PACKAGES"
  (cd tests/runtime && ../../$PY - "../../$PACKAGES" <<'PY'
import sys
from pathlib import Path
import numpy as np
from runtime_helpers import EMBED_KERNELS, THREADS_KERNELS, MLP_KERNELS, embed_program, threads_program, mlp_program, mlp_weights, write_test_package
out = Path(sys.argv[1])
write_test_package(out / "embed.aotpack", embed_program(), EMBED_KERNELS,
                   {"table": np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)})
write_test_package(out / "threads.aotpack", threads_program(), THREADS_KERNELS, {})
write_test_package(out / "mlp.aotpack", mlp_program(), MLP_KERNELS, mlp_weights(np.random.default_rng(0)))
PY
  )
}

asan() {
  configure build/asan address,undefined
  build/asan/aotpack-unit-tests
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" AOTPACK_TEST_BUILD=build/asan \
    $PY -m pytest -q -p no:cacheprovider --capture=sys tests/runtime  # sys: a sanitizer's report on fd 2 shows
  unset ASAN_OPTIONS UBSAN_OPTIONS
}

tsan() {
  configure build/tsan thread
  packages
  # TSan's reports fail the run (exitcode 66); the threads' results are compared with serial runs bit for bit.
  TSAN_OPTIONS=halt_on_error=1:exitcode=66 build/tsan/aotpack-concurrency-test sessions "$PACKAGES/embed.aotpack" 16 1000
  TSAN_OPTIONS=halt_on_error=1:exitcode=66 build/tsan/aotpack-concurrency-test sessions "$PACKAGES/mlp.aotpack" 16 1000
  TSAN_OPTIONS=halt_on_error=1:exitcode=66 build/tsan/aotpack-concurrency-test race "$PACKAGES/threads.aotpack" 8 40 25
}

leaks() {
  [ -x build/asan/aotpack-concurrency-test ] || configure build/asan address,undefined
  packages
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 build/asan/aotpack-concurrency-test leaks "$PACKAGES/embed.aotpack" 10000
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 build/asan/aotpack-concurrency-test leaks "$PACKAGES/mlp.aotpack" 10000
}

case "$WHAT" in
  asan) asan ;;
  tsan) tsan ;;
  leaks) leaks ;;
  all) asan; tsan; leaks ;;
  *) echo "usage: scripts/sanitize.sh [asan|tsan|leaks|all]" >&2; exit 2 ;;
esac
echo "sanitize.sh $WHAT: clean"
