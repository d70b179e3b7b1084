#!/usr/bin/env bash
# Half-precision CUDA exports as a new user runs them (issue 9), on a GPU machine:
#   aotpack export examples/<model>/model.py --target cuda --dtype bf16 --dynamic seq=1..2048
# at the real sizes, with verification on (the default: over the range, on this GPU), then `aotpack inspect`.
#   scripts/gpu_export_check.sh OUT_DIR [gpt2 bert llama]      (DTYPES="bf16" for one precision)
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
OUT=${1:?usage: scripts/gpu_export_check.sh OUT_DIR [models]}; shift
MODELS=${*:-gpt2 bert}
PY=${PYTHON:-python3}
mkdir -p "$OUT" build/gpu_export/site
ln -sfn "$REPO" build/gpu_export/site/aotpack
export PYTHONPATH="$REPO/build/gpu_export/site${PYTHONPATH:+:$PYTHONPATH}" AOTPACK_EXAMPLE_SIZE=full
export AOTPACK_RUNTIME_LIB=${AOTPACK_RUNTIME_LIB:-$REPO/build/runtime/libaotpack.so}
ARCH=$($PY -c "import torch; a, b = torch.cuda.get_device_capability(0); print(10 * a + b)")
for model in $MODELS; do
  for dtype in ${DTYPES:-bf16 fp16}; do
    pkg=build/gpu_export/$model-$dtype.aotpack
    /usr/bin/time -f "%e s, %M KB max RSS" $PY -m aotpack.cli export "examples/$model/model.py" --target cuda \
      --cuda-arch "$ARCH" --dtype "$dtype" --dynamic seq=1..2048 -o "$pkg" > "$OUT/export-$model-$dtype.log" 2>&1
    echo "$model $dtype: export rc $?"
    tail -4 "$OUT/export-$model-$dtype.log"
    [ -f "$pkg" ] && $PY -m aotpack.cli inspect "$pkg" > "$OUT/inspect-$model-$dtype.txt" 2>&1 && rm -f "$pkg"
  done
done
