"""Read timeouts: a client that sends half a request's headers or body is disconnected after the
timeout (uvicorn alone waited for ever), while whole requests, slow ones within the limits and
long answers are served as before."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from engine.serve.read_timeouts import ReadTimeouts, timed_http_protocol
from tests.support.servers import engine_server, free_port
from tests.support.slow_clients import HALF_BODY, HALF_HEADERS, seconds_until_closed

SHORT = ReadTimeouts(header_timeout_s=1.0, body_timeout_s=1.0)


async def echo(scope, receive, send):
    """An ASGI app that reads the whole body, waits ``?wait`` seconds and answers its length."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    wait = scope["query_string"].decode().partition("wait=")[2]
    if wait:
        import asyncio

        await asyncio.sleep(float(wait))
    answer = str(len(body)).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(answer)).encode())]})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture
def echo_url():
    import uvicorn

    port = free_port()
    config = uvicorn.Config(echo, host="127.0.0.1", port=port, log_level="warning",
                            http=timed_http_protocol(SHORT))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    end = time.monotonic() + 30
    while not server.started and time.monotonic() < end:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_half_sent_headers_and_bodies_are_closed(echo_url):
    headers_s = seconds_until_closed(echo_url, HALF_HEADERS, wait_s=8)
    body_s = seconds_until_closed(echo_url, HALF_BODY, wait_s=8)
    assert headers_s is not None and 0.9 <= headers_s < 3, headers_s
    assert body_s is not None and 0.9 <= body_s < 3, body_s


def test_whole_requests_slow_senders_within_the_limit_and_long_answers_are_served(echo_url):
    assert httpx.post(echo_url, content=b"x" * 1000, timeout=10).text == "1000"
    assert httpx.get(echo_url + "/?wait=2.5", timeout=10).text == "0"  # answering has no limit
    with socket.create_connection(("127.0.0.1", int(echo_url.rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
        time.sleep(0.5)  # half the body now, the rest within the body timeout
        s.sendall(b"cd")
        assert read_answer(s) == b"4"
        time.sleep(0.6)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # a second request on the connection
        assert read_answer(s) == b"0"


def read_answer(s: socket.socket) -> bytes:
    """The body of one response with a one-byte ``content-length``."""
    data = b""
    while not (b"\r\n\r\n" in data and len(data.partition(b"\r\n\r\n")[2]) >= 1):
        chunk = s.recv(4096)
        assert chunk, "closed before the answer"
        data += chunk
    return data.partition(b"\r\n\r\n")[2]


def test_timeouts_name_a_bad_value():
    with pytest.raises(ValueError, match="header_timeout_s must be a positive number"):
        ReadTimeouts(header_timeout_s=0)
    with pytest.raises(ValueError, match="body_timeout_s must be a positive number"):
        ReadTimeouts(body_timeout_s="5")


@pytest.mark.slow
def test_the_api_server_closes_half_sent_requests():
    with engine_server("--dtype", "float32", "--compile", "off", "--header-timeout", "1",
                       "--body-timeout", "1") as url:
        assert seconds_until_closed(url, HALF_HEADERS, wait_s=8) < 3
        assert seconds_until_closed(url, HALF_BODY, wait_s=8) < 3
        assert httpx.get(url + "/health", timeout=10).status_code == 200
