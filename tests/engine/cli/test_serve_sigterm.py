"""``python -m engine serve`` on SIGTERM, as a child process on 127.0.0.1: uvicorn's graceful
shutdown, then the engine stopped and status 0 (uvicorn re-raising the signal into the default
handler had killed it with status −15 before the engine stopped), well within a generous bound
(a behaviour bound, not a benchmark)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import time

from tests.support.servers import ROOT, free_port, stop_child, wait_healthy

BOUND_S = 5.0


@pytest.mark.slow
def test_serve_exits_with_status_0_on_sigterm():
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--weights", "fp32", "--compile", "off"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            stop_child(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert took < BOUND_S, f"exit took {took:.1f} s"
