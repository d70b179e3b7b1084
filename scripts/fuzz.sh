#!/usr/bin/env bash
# Builds the runtime's libFuzzer targets (runtime_cpp/fuzz, CMake option AOTPACK_FUZZ, clang with ASan and
# UBSan) and runs each for a bounded time: fuzz_package on whole packages, fuzz_plan on program.json in a
# package whose digests are recomputed. Seeds: an export of examples/mlp (and the committed program.json
# seeds in runtime_cpp/fuzz/seeds/). Crashes are written to build/fuzz/crashes/<target>/.
#
#   scripts/fuzz.sh [SECONDS_EACH=600]        (needs clang: apt-get install -y clang)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-600}
BUILD=build/fuzz
PY=.venv/bin/python
command -v clang++ > /dev/null || { echo "fuzz.sh: clang++ not found (apt-get install -y clang)" >&2; exit 2; }
cmake -S runtime_cpp -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DAOTPACK_FUZZ=ON \
  -DAOTPACK_BUILD_TESTS=OFF > /dev/null
cmake --build "$BUILD" -j2 --target aotpack-fuzz_package aotpack-fuzz_plan

SEEDS="$BUILD/seeds"
mkdir -p "$SEEDS/package" "$SEEDS/plan" "$SEEDS/base" "$BUILD/crashes/fuzz_package" "$BUILD/crashes/fuzz_plan"
if [ ! -f "$SEEDS/mlp.aotpack" ]; then
  AOTPACK_RUNTIME_LIB="$PWD/build/runtime/libaotpack.so" $PY -m aotpack.cli export examples/mlp/model.py \
    --dynamic batch=1..8 -o "$SEEDS/mlp.aotpack" > "$BUILD/seed-export.log" 2>&1
fi
cp "$SEEDS/mlp.aotpack" "$SEEDS/package/"
# The base package's members as files, for fuzz_plan, and its program.json as a seed.
$PY - "$SEEDS/mlp.aotpack" "$SEEDS/base" "$SEEDS/plan" <<'PY'
import sys, zipfile
from pathlib import Path
src, base, plan = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
with zipfile.ZipFile(src) as zf:
    names = [i.filename for i in zf.infolist()]
    for name in names:
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_bytes(zf.read(name))
    (plan / "mlp.program.json").write_bytes(zf.read("program.json"))
(base / "members.txt").write_text("\n".join(names) + "\n")
PY
cp runtime_cpp/fuzz/seeds/plan/* "$SEEDS/plan/" 2>/dev/null || true

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for target in fuzz_package fuzz_plan; do
  corpus="$BUILD/corpus/$target"
  mkdir -p "$corpus"
  seeds="$SEEDS/package"; [ "$target" = fuzz_plan ] && seeds="$SEEDS/plan"
  echo "== $target: $SECONDS_EACH s"
  AOTPACK_FUZZ_BASE="$SEEDS/base" nice "$BUILD/aotpack-$target" "$corpus" "$seeds" -max_total_time="$SECONDS_EACH" \
    -max_len=262144 -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$BUILD/crashes/$target/" 2>&1 | tee "$BUILD/$target.log" | grep -E "^#[0-9]+.*(DONE|INITED)|stat::|ERROR|SUMMARY" || true
  if ls "$BUILD/crashes/$target/" | grep -q .; then status=1; echo "$target: crashes in $BUILD/crashes/$target/"; fi
done
exit $status
