#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU (no network needed): builds the C++ runtime, runs tests/gpu and
# a short benchmark (aotpack vs eager vs torch.compile on the examples), then prints a summary. ~10 minutes.
#
#   scripts/gpu_check.sh            # with python3 from PATH (torch, triton, jinja2, click, safetensors there)
#   PYTHON=.venv/bin/python scripts/gpu_check.sh
#
# Works without installing aotpack: the repository root is put on the path as the package `aotpack`.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-python3}
WORK=${GPU_CHECK_DIR:-build/gpu_check}
mkdir -p "$WORK/site"
ln -sfn "$REPO" "$WORK/site/aotpack"
export PYTHONPATH="$REPO/$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
START=$(date +%s)

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi unavailable"
$PY -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"

echo "== runtime build"
cmake -S runtime_cpp -B build/runtime -DCMAKE_BUILD_TYPE=Release > "$WORK/cmake.log" 2>&1 \
  && cmake --build build/runtime -j"$(nproc)" >> "$WORK/cmake.log" 2>&1
BUILD_RC=$?
[ $BUILD_RC -eq 0 ] && echo "built build/runtime/libaotpack.so" || tail -20 "$WORK/cmake.log"
export AOTPACK_RUNTIME_LIB="$REPO/build/runtime/libaotpack.so"

echo "== GPU tests"
# pytest runs the tests' exports in parallel already: one Triton compile process each, not a pool each.
AOTPACK_COMPILE_JOBS=1 timeout "${GPU_TEST_TIMEOUT:-420}" $PY -m pytest -q -p no:logging -p no:cacheprovider -n "${GPU_CHECK_JOBS:-8}" tests/gpu \
  --junitxml="$WORK/gpu_tests.xml" > "$WORK/gpu_tests.log" 2>&1
TEST_RC=$?
grep -E "^(FAILED|ERROR)" "$WORK/gpu_tests.log" | head -40
tail -3 "$WORK/gpu_tests.log"

echo "== benchmark and cross-compiled packages"
timeout "${GPU_BENCH_TIMEOUT:-240}" $PY scripts/gpu_bench.py --quick "$WORK/bench" > "$WORK/bench.log" 2>&1
BENCH_RC=$?
grep -v "^{" "$WORK/bench.log" | tail -15

echo "== summary"
$PY - "$WORK" "$TEST_RC" "$BENCH_RC" "$BUILD_RC" "$START" <<'PYEOF'
import json, sys, time, xml.etree.ElementTree as ET
from pathlib import Path
work, test_rc, bench_rc, build_rc, start = Path(sys.argv[1]), *map(int, sys.argv[2:])
print(f"runtime build: {'ok' if build_rc == 0 else 'FAILED'}")
try:
    suite = ET.parse(work / "gpu_tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    n, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    print(f"GPU tests: {n - f - e - s} passed, {f} failed, {e} errors, {s} skipped (pytest rc {test_rc})")
except Exception as ex:
    print(f"GPU tests: no report ({ex}); pytest rc {test_rc}")
try:
    b = json.loads((work / "bench" / "bench.json").read_text())
    print(f"device: {b['device']}, torch {b['torch']}, triton {b.get('triton')}")
    for r in b["cross_compiled"]:
        print(f"cross-compiled {r['package']} (triton {r['triton']}, {r['targets']}): "
              f"{'ok' if r.get('ok') else 'FAILED'} {r.get('rel_err_cuda_vs_cpu', r.get('error', ''))}")
    print(f"{'example':<18} {'shapes':<18} {'aotpack ms':>10} {'eager ms':>9} {'eager+io':>9} {'compile ms':>10} {'rel err':>8}")
    for r in b["bench"]:
        if "error" in r:
            print(f"{r['example']:<18} FAILED: {r['error']}")
            continue
        print(f"{r['example']:<18} {str(r['shapes']):<18} {r['aotpack_ms']:>10} {r['eager_ms']:>9} "
              f"{r['eager_host_io_ms']:>9} {str(r['torch_compile_ms']):>10} {r['rel_err_vs_eager_gpu']:>8}")
except Exception as ex:
    print(f"benchmark: no results ({ex}); rc {bench_rc}")
print(f"total {time.time() - start:.0f} s")
PYEOF
