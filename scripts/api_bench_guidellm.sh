#!/usr/bin/env bash
# Benchmark a running OpenAI-compatible server with guidellm, a third-party benchmark client,
# at a few constant request rates; then print TTFT, ITL and throughput per rate.
#
#   python -m engine serve --port 8000 &                         # or any OpenAI-compatible server
#   bash scripts/api_bench_guidellm.sh http://127.0.0.1:8000 assets/bench/guidellm
#
# guidellm lives in its own virtual environment (.venv-guidellm, made on first use: it pins its
# own click, datasets and torch versions, which must not disturb the playground's). Requests are
# synthetic text of PROMPT_TOKENS prompt tokens and OUTPUT_TOKENS output tokens, counted with the
# embedded model's tokenizer; each rate runs REQUESTS requests (or MAX_SECONDS, whichever ends
# first). Environment: RATES (default "0.25,0.5,1,2"), REQUESTS (16), PROMPT_TOKENS (128),
# OUTPUT_TOKENS (64), MAX_SECONDS (240), GUIDELLM_VERSION (0.8.1).
set -euo pipefail
cd "$(dirname "$0")/.."
URL=${1:-http://127.0.0.1:8000}
OUT=${2:-assets/bench/guidellm}
RATES=${RATES:-0.25,0.5,1,2}
REQUESTS=${REQUESTS:-16}
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-64}
MAX_SECONDS=${MAX_SECONDS:-240}
VENV=.venv-guidellm

if [ ! -x "$VENV/bin/guidellm" ]; then
  echo "installing guidellm ${GUIDELLM_VERSION:-0.8.1} into $VENV (first use only)..."
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -U pip
  TORCH=$(grep -E '^torch==' requirements.txt | head -1)
  if [ "$(SETUP_PRINT_BUILD=1 bash scripts/setup.sh)" = cpu ]; then
    # the CPU wheel: PyPI's default Linux wheel is a CUDA build of several GB
    "$VENV/bin/python" -m pip install -q --retries 1 --timeout 30 "$TORCH" \
      --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple \
      || "$VENV/bin/python" -m pip install -q "${TORCH}+cpu"
  fi
  "$VENV/bin/python" -m pip install -q "guidellm==${GUIDELLM_VERSION:-0.8.1}" "$TORCH"
fi

[ -x .venv/bin/python ] || { echo "run 'bash scripts/setup.sh' first (the tokenizer comes from it)"; exit 1; }
TOKENIZER=$(.venv/bin/python -c \
  "from engine.model.embedded import embedded_config_folder as f; print(f('smollm2-135m'))")
mkdir -p "$OUT"
"$VENV/bin/guidellm" run \
  --backend "kind=openai_http,target=$URL" \
  --profile kind=constant,rate=1 --override profile.rate "$RATES" \
  --constraint "kind=max_requests,count=$REQUESTS" \
  --constraint "kind=max_duration,seconds=$MAX_SECONDS" \
  --data "kind=synthetic_text,prompt_tokens=$PROMPT_TOKENS,output_tokens=$OUTPUT_TOKENS" \
  --tokenizer "kind=huggingface_auto,model=$TOKENIZER" \
  --output "kind=json,path=$OUT/benchmarks.json" \
  --disable-console-interactive
.venv/bin/python scripts/guidellm_summary.py "$OUT/benchmarks.json" | tee "$OUT/summary.md"
