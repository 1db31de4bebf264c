"""``python -m app`` on SIGTERM (``docker stop``, a Space restart), as a child process on
127.0.0.1 with a page's event stream open: it exits with status 0, without Gradio's "Keyboard
interruption" line or a traceback, well within a generous bound (a behaviour bound, not a
benchmark: the old path printed the line and took about 6 s)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.support.servers import ROOT, free_port, stop_child, wait_until

BOUND_S = 5.0


def _page_up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _hold_heartbeat(url: str, opened: threading.Event) -> None:
    """Keep a page's heartbeat stream open, as a browser tab does, until the server goes."""
    try:
        with httpx.stream("GET", f"{url}gradio_api/heartbeat/sigterm-test", timeout=60) as r:
            opened.set()
            for _ in r.iter_raw():
                pass
    except httpx.HTTPError:
        pass
    finally:
        opened.set()


@pytest.mark.slow
def test_sigterm_exits_cleanly_and_quickly():
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "app", "--host", "127.0.0.1", "--port", str(port),
                             "--weights", "fp32", "--compile", "off"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_until(lambda: proc.poll() is not None or _page_up(url), timeout=300)
        assert proc.poll() is None, proc.stdout.read()
        opened = threading.Event()
        threading.Thread(target=_hold_heartbeat, args=(url, opened), daemon=True).start()
        assert opened.wait(30)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            stop_child(proc)
    assert proc.returncode == 0, out
    assert "Keyboard interruption" not in out and "Traceback" not in out, out
    assert "Playground running at" in out
    assert took < BOUND_S, f"exit took {took:.1f} s"
