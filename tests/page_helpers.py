"""Helpers for tests of ``python -m app`` as an outsider sees it (no tests here): the page in
a child process on 127.0.0.1, and raw HTTP to it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

from serve_helpers import ROOT, free_port


@contextmanager
def page_server(*args: str):
    """``python -m app --port <free> *args`` in a child process; yields ``(base URL, Popen)``
    once it prints its URL, and stops it at the end."""
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("GRADIO_TEMP_DIR", None)
    proc = subprocess.Popen([sys.executable, "-m", "app", "--port", str(port), *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, lines = time.time() + 240, []
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("the page exited:\n" + "".join(lines))
            lines.append(line)
            if "OpenAI-compatible API" in line or "Playground running at" in line and "--no-api" in args:
                break
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


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
