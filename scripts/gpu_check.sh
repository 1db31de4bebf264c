#!/usr/bin/env bash
# One prepared run on a machine with an NVIDIA GPU (at most about 10 minutes):
#   1. the tests marked `gpu`;
#   2. scripts/gpu_check.py: environment, pool set-up, a short generation with telemetry,
#      greedy parity with Hugging Face generate, batch 1 and 16, NVML readings, the batch
#      experiment in quick mode, and the compiled decode step (torch.compile over the batch
#      buckets) beside the CUDA-graph runner; all figures in one JSON.
# Usage: bash scripts/gpu_check.sh [OUT_DIR] [MODEL_DIR]
#   OUT_DIR defaults to $OUT (or gpu-check-out). MODEL_DIR: a folder with the model's config
#   and tokenizer files; without weights in it, the model gets seeded random weights (make it
#   here with `bash scripts/gpu_check.sh --prepare DIR`). Wheels of packages the machine lacks
#   can lie in DIR/wheels and are installed to /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--prepare" ]; then
  dir=${2:-.gpu}
  mkdir -p "$dir/model"
  PYTHON=${PYTHON:-.venv/bin/python}
  src=$("$PYTHON" -c "from engine.model.embedded import EMBEDDED, _embedded_folder; print(_embedded_folder(EMBEDDED['smollm2-135m'], None)[0])")
  cp "$src"/{config.json,generation_config.json,tokenizer.json,tokenizer_config.json,chat_template.jinja} "$dir/model/" 2>/dev/null
  echo "model config and tokenizer copied to $dir/model (no weights: random weights on the GPU)"
  exit 0
fi
OUT_DIR=${1:-${OUT:-gpu-check-out}}
MODEL_DIR=${2:-.gpu/model}
PY=${PYTHON:-python3}
mkdir -p "$OUT_DIR"
if ls "$(dirname "$MODEL_DIR")"/wheels/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$(dirname "$MODEL_DIR")"/wheels/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv \
  > "$OUT_DIR/nvidia-smi.csv" 2>&1 || true
timeout 240 "$PY" -m pytest -m gpu -q -p no:cacheprovider 2>&1 | tee "$OUT_DIR/pytest-gpu.log"
args=(--out "$OUT_DIR/gpu_check.json")
if [ -d "$MODEL_DIR" ]; then
  args+=(--model "$MODEL_DIR")
  ls "$MODEL_DIR"/*.safetensors >/dev/null 2>&1 || args+=(--random-weights)
fi
timeout 300 "$PY" scripts/gpu_check.py "${args[@]}" 2>&1 | tee "$OUT_DIR/gpu_check.log"
