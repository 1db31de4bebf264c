"""The page as an outsider sees it: ``python -m app`` in
a child process on 127.0.0.1, and raw HTTP to it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

from tests.support.servers import ROOT, free_port, stop_child


@contextmanager
def page_server(*args: str, log_path=None):
    """``python -m app --port <free> *args`` in a child process, its output going to
    ``log_path`` (a temporary file by default); yields ``(base URL, Popen, log path)`` once
    it says where it serves, and stops it at the end."""
    import tempfile

    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("GRADIO_TEMP_DIR", None)
    if log_path is None:
        log_path = tempfile.mkstemp(prefix="page-", suffix=".log")[1]
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "app", "--port", str(port), *args], cwd=ROOT,
                            env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    ready = "Playground running at" if "--no-api" in args else "OpenAI-compatible API"
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            text = open(log_path).read()
            if proc.poll() is not None:
                raise RuntimeError("the page exited:\n" + text)
            if ready in text:
                break
            time.sleep(0.5)
        else:
            raise TimeoutError("the page did not start:\n" + open(log_path).read())
        yield f"http://127.0.0.1:{port}", proc, log_path
    finally:
        stop_child(proc)
        log.close()


def raw_post(url: str, path: str, declared: int, sent: bytes, timeout: float = 30.0) -> bytes:
    """POST with ``Content-Length: declared`` but only ``sent`` of the body; return what the
    server answers before the rest would arrive (b"" if it waits until ``timeout``)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {declared}\r\n\r\n".encode() + sent)
        out = b""
        try:
            while b"\r\n\r\n" not in out:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except socket.timeout:
            pass
        return out
