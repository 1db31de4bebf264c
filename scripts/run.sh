#!/usr/bin/env bash
# Sets up .venv (see scripts/setup.sh: torch for this machine's CPU or NVIDIA GPU, the packages,
# the embedded model), then starts the playground on it. Extra arguments go to `python -m app`
# (e.g. `bash scripts/run.sh --port 7861`); open http://127.0.0.1:7860.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh requirements.txt
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
exec .venv/bin/python -m app "$@"
