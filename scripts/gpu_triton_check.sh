#!/usr/bin/env bash
# The GPU half of issue 15 (docs/serving.md), for a GPU machine without network: unpacks the server bundle
# that `make triton-server-bundle` made on a machine with network (carry build/tritonserver-bundle.tar.xz, 26 MB),
# builds the runtime and the Triton backend, runs tests/gpu/test_gpu_triton_server.py and the benchmark on CUDA.
#
#   scripts/gpu_triton_check.sh                   # python3 from PATH (torch, triton, numpy, click there)
#   PYTHON=.venv/bin/python scripts/gpu_triton_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-python3}
WORK=${GPU_TRITON_DIR:-build/gpu_triton}
BUNDLE=${TRITON_BUNDLE:-build/tritonserver-bundle.tar.xz}
mkdir -p "$WORK/site" "$WORK/tritonserver"
ln -sfn "$REPO" "$WORK/site/aotpack"   # the repository root is the package `aotpack`, as in gpu_check.sh
export PYTHONPATH="$REPO/$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${TRITON_HOME:-}" ]; then
  [ -f "$BUNDLE" ] || { echo "no $BUNDLE: run \`make triton-server-bundle\` where there is network and carry it"; exit 1; }
  tar -xJf "$BUNDLE" -C "$WORK/tritonserver" && export TRITON_HOME="$REPO/$WORK/tritonserver"
fi
echo "== build"
cmake -S runtime_cpp -B build/runtime -DCMAKE_BUILD_TYPE=Release > "$WORK/cmake.log" 2>&1 \
  && cmake --build build/runtime -j"$(nproc)" >> "$WORK/cmake.log" 2>&1 || { tail -20 "$WORK/cmake.log"; exit 1; }
export AOTPACK_RUNTIME_LIB="$REPO/build/runtime/libaotpack.so"
echo "== tests/gpu/test_gpu_triton_server.py"
timeout "${GPU_TEST_TIMEOUT:-300}" $PY -m pytest -q -rs -p no:cacheprovider tests/gpu/test_gpu_triton_server.py
echo "== benchmark (CUDA)"
timeout "${GPU_BENCH_TIMEOUT:-360}" $PY scripts/triton_bench.py "$WORK/bench" --device cuda --seconds "${SECONDS_PER_POINT:-5}"
