"""``python -m engine ...`` as a user runs it (a child process in the repository root, offline)."""

import os
import subprocess
import sys

from tests.support.paths import REPO

ROOT = str(REPO)


def run(*args, timeout=240):
    """Run ``python -m engine *args``; returns the ``CompletedProcess`` (text output)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
