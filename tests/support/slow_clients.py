"""Clients that send half a request on a raw socket (no tests here)."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

HALF_HEADERS = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow"
HALF_BODY = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\": ")


def seconds_until_closed(url: str, data: bytes, wait_s: float = 10.0) -> float | None:
    """Send ``data`` (half a request) to ``url``'s host and port and read until the server
    closes the connection: the seconds that took, or ``None`` if it was still open after
    ``wait_s`` (anything the server answers meanwhile, such as a 408, is read and ignored)."""
    parts = urlsplit(url)
    t0 = time.monotonic()
    with socket.create_connection((parts.hostname, parts.port), timeout=wait_s) as s:
        s.sendall(data)
        while True:
            left = wait_s - (time.monotonic() - t0)
            if left <= 0:
                return None
            s.settimeout(left)
            try:
                chunk = s.recv(4096)
            except socket.timeout:
                return None
            except ConnectionResetError:
                return time.monotonic() - t0
            if not chunk:
                return time.monotonic() - t0
