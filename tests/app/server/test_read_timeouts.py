"""The page's server (Gradio's uvicorn) disconnects a client that sends half a request's
headers or body, after the read timeouts given to ``launch`` (it waited for ever before)."""

from __future__ import annotations

import httpx

from app.page import build_demo
from app.server.assets import read_css
from app.server.launch import launch, use_read_timeouts
from app.state.playground import Playground
from engine.serve.read_timeouts import ReadTimeouts
from tests.support.fakes import FakeEngine
from tests.support.servers import free_port
from tests.support.slow_clients import seconds_until_closed

HALF_HEADERS = b"GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow"
HALF_BODY = (b"POST /gradio_api/queue/join HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"data\": ")


def test_the_page_closes_half_sent_requests(tmp_path):
    pg = Playground(FakeEngine(), trace_dir=tmp_path / "traces", monitor=False)
    demo = build_demo(pg, max_concurrency=4)
    demo.queue(default_concurrency_limit=4)
    url, _ = launch(demo, "127.0.0.1", free_port(), css=read_css(),
                    read_timeouts=ReadTimeouts(header_timeout_s=1.0, body_timeout_s=1.0))
    try:
        headers_s = seconds_until_closed(url, HALF_HEADERS, wait_s=8)
        body_s = seconds_until_closed(url, HALF_BODY, wait_s=8)
        assert headers_s is not None and headers_s < 3, headers_s
        assert body_s is not None and body_s < 3, body_s
        assert httpx.get(url.rstrip("/") + "/config", timeout=10).status_code == 200
    finally:
        demo.close()
        pg.close()
        use_read_timeouts(None)  # later servers of this process get the defaults again


def test_main_refuses_a_bad_timeout(capsys):
    from app.server.main import main

    assert main(["--header-timeout", "0"]) == 2
    assert "header_timeout_s must be a positive number" in capsys.readouterr().err
