"""Servers for the tests, all on 127.0.0.1 (no tests here): a free port, polling, the page
served as ``python -m app`` serves it, a ``python -m engine serve`` child process, an app
served by uvicorn in a thread, and a parsed ``/metrics``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx

from tests.support.paths import REPO

ROOT = str(REPO)

def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def launch(pg, concurrency: int = 8):
    """Serve the page for playground ``pg`` on a free loopback port with the launch settings
    of ``python -m app`` (``app.server.launch``); returns (demo, url)."""
    from app.server.assets import read_css
    from app.server.launch import launch as serve
    from app.page import build_demo

    demo = build_demo(pg, max_concurrency=concurrency)
    demo.queue(default_concurrency_limit=concurrency)
    url, _ = serve(demo, "127.0.0.1", free_port(), css=read_css())
    return demo, url

def wait_until(fn, timeout: float = 60.0, every: float = 0.1):
    """Poll ``fn()`` until it returns something truthy (returned) or ``timeout`` s pass (None)."""
    end = time.time() + timeout
    while time.time() < end:
        value = fn()
        if value:
            return value
        time.sleep(every)
    return None

def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout: float = 300.0) -> None:
    """Poll ``url``/health until it answers 200 (raises if the process exits or time runs out)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout} s")

@contextmanager
def engine_server(*args: str):
    """``python -m engine serve --port <free> *args`` in a child process; yields its base URL
    (``http://127.0.0.1:PORT``) once healthy, and stops it at the end."""
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--host", "127.0.0.1",
                             "--port", str(port), *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        stop_child(proc)


def stop_child(proc) -> None:
    """Stop a server child process: SIGTERM, then SIGKILL if it has not exited in 30 s."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)

@contextmanager
def app_in_thread(app):
    """Serve an ASGI ``app`` with uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 30
        while not server.started and time.monotonic() < end:
            time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(10)

def scrape(url: str) -> dict:
    """``/metrics`` parsed with prometheus-client's parser: ``{(sample name, labels as a sorted
    tuple): value}``, labels without ``model_name``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=10).text
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "model_name"))
            out[(s.name, labels)] = s.value
    return out

def value(metrics: dict, name: str, **labels) -> float:
    """One sample of :func:`scrape`'s result (0 when absent)."""
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)
