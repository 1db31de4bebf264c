"""The page's own routes cap what a client may send: a 50 MB body is refused before it is read
(the page's memory stays where it was), and an event's over-long text is refused before it
joins Gradio's queue."""

from __future__ import annotations

import json

import httpx
import psutil
import pytest

from app.server.limits import MAX_BODY_BYTES, MAX_TEXT_CHARS
from tests.support.pages import page_server, raw_post

BIG = 50_000_000


@pytest.fixture(scope="module")
def page():
    with page_server() as served:
        yield served


def rss(proc) -> int:
    return psutil.Process(proc.pid).memory_info().rss


@pytest.mark.slow
def test_ten_50_mb_bodies_leave_the_pages_memory_as_it_was(page):
    url, proc, _ = page
    body = json.dumps({"data": ["x" * BIG]}).encode()
    assert httpx.post(url + "/gradio_api/call/generate", json={"data": ["Hi", 0, 1.0, 0, 1.0, 2]},
                      timeout=120).status_code == 200  # warm: the route has run once
    before = rss(proc)
    for _ in range(10):
        try:
            r = httpx.post(url + "/gradio_api/call/generate", content=body, timeout=120,
                           headers={"content-type": "application/json"})
            assert r.status_code == 413, r.text[:200]
        except httpx.TransportError:  # refused and closed while the body was still going out
            pass
    after = rss(proc)
    assert after - before < 100 * 2**20, (before, after)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/gradio_api/call/generate", "/gradio_api/queue/join",
                                  "/gradio_api/upload", "/v1/completions"])
def test_a_body_over_the_cap_is_refused_before_it_is_read(page, path):
    url, _, _ = page
    head = raw_post(url, path, BIG, b'{"data": ["' + b"x" * 1000)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]


@pytest.mark.slow
def test_a_text_over_the_limit_is_refused_before_the_queue(page):
    url, _, _ = page
    text = "x" * (MAX_TEXT_CHARS + 1)
    assert len(json.dumps({"data": [text]})) < MAX_BODY_BYTES
    r = httpx.post(url + "/gradio_api/call/generate", json={"data": [text]}, timeout=60)
    assert r.status_code == 413 and str(MAX_TEXT_CHARS) in r.json()["detail"]
    r = httpx.post(url + "/gradio_api/queue/join", timeout=60,
                   json={"data": [text], "fn_index": 0, "session_hash": "s" * 11})
    assert r.status_code == 413
    # a prompt under the limit reaches the endpoint, which refuses it for the context
    r = httpx.post(url + "/gradio_api/call/generate", json={"data": ["word " * 20_000, 0]},
                   timeout=60)
    assert r.status_code == 200
    event = r.json()["event_id"]
    with httpx.stream("GET", url + f"/gradio_api/call/generate/{event}", timeout=120) as s:
        lines = "\n".join(s.iter_lines())
    assert "event: error" in lines and "context window" in lines, lines[:500]
