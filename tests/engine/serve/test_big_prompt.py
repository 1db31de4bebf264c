"""A huge prompt never stalls the server: its body is capped, a prompt that cannot fit is
refused before it is tokenized (by its size, or by its beginning), and tokenizing happens off
the event loop, so another client's stream keeps flowing while the huge request is refused.
``python -m engine serve`` runs in a child process (its own event loop and GIL)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.support.servers import app_in_thread

MODEL = "smollm2-135m"
HUGE = "word " * 1_000_000  # 5 MB, 1,000,001 tokens


class Stream:
    """Another client's long stream; the arrival time of each of its chunks."""

    def __init__(self, url: str):
        self.times: list[float] = []
        self.thread = threading.Thread(target=self._run, args=(url,), daemon=True)
        self.thread.start()
        end = time.monotonic() + 120
        while len(self.times) < 5 and time.monotonic() < end:
            time.sleep(0.01)
        assert len(self.times) >= 5, "the other stream did not start"

    def _run(self, url):
        body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 2000,
                "ignore_eos": True, "stream": True, "temperature": 0}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=300) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    self.times.append(time.perf_counter())
                if self.done:
                    return

    done = False

    def max_gap(self, t0: float, t1: float) -> float:
        """The longest wait for a chunk that overlaps ``[t0, t1]`` (up to the next chunk)."""
        ts = list(self.times)
        gaps = [b - a for a, b in zip(ts, ts[1:]) if b > t0 and a < t1]
        after = [t for t in ts if t > t1]
        assert after, "the other stream stopped"
        return max(gaps, default=0.0)


@pytest.mark.slow
def test_another_stream_keeps_flowing_while_huge_prompts_are_refused(server, loaded):
    t = time.perf_counter()
    loaded.tokenizer(HUGE)  # what tokenizing the huge prompt costs (the server used to, on its loop)
    tokenize_s = time.perf_counter() - t
    other = Stream(server)
    try:
        bodies = [
            ("/v1/completions", {"prompt": HUGE, "max_tokens": 1}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": HUGE}]}),
            ("/v1/completions", {"prompt": "word " * 200_000, "max_tokens": 1}),  # 1 MB
            ("/v1/completions", {"prompt": "word " * 100_000, "max_tokens": 1}),  # 500 kB
        ]
        results = []
        for route, body in bodies:
            t0 = time.perf_counter()
            r = httpx.post(server + route, json={"model": MODEL, **body}, timeout=300)
            t1 = time.perf_counter()
            time.sleep(0.3)  # let the next chunk of the other stream arrive
            results.append((route, r, t1 - t0, other.max_gap(t0, t1)))
    finally:
        other.done = True
    for route, r, refusal_s, gap_s in results:
        # the server did not spend a tokenization of the huge prompt on its event loop
        assert gap_s < tokenize_s / 3, (route, r.status_code, refusal_s, gap_s, tokenize_s)
    (_, big, _, _), (_, chat, _, _), (_, mb, _, _), (_, half, _, _) = results
    for r in (big, chat):  # over the body cap: 413, nothing parsed
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert mb.status_code == 400 and mb.json()["error"]["param"] == "prompt"
    assert "bytes" in mb.json()["error"]["message"] and "8192" in mb.json()["error"]["message"]
    assert half.status_code == 400 and half.json()["error"]["param"] == "prompt"
    assert "characters" in half.json()["error"]["message"]  # measured by its beginning only
    assert "8192" in half.json()["error"]["message"]


@pytest.mark.slow
def test_a_prompt_under_the_bounds_still_fits_and_is_served(server):
    r = httpx.post(server + "/v1/completions", json={
        "model": MODEL, "prompt": "word " * 7000, "max_tokens": 2, "temperature": 0}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 7001


@pytest.mark.slow
def test_a_body_without_content_length_is_cut_at_the_cap(server):
    def chunks():
        for _ in range(100):
            yield b"x" * 65536  # 6.5 MB, chunked: the cap is found while reading

    r = httpx.post(server + "/v1/completions", content=chunks(), timeout=60,
                   headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_the_pages_v1_mount_caps_the_body_too(engine):
    from starlette.applications import Starlette

    from app.server.openai_mount import mount_api

    page = Starlette()
    assert mount_api(page, engine, host="127.0.0.1") is None
    with app_in_thread(page) as url:
        r = httpx.post(url + "/v1/completions", timeout=60,
                       json={"model": MODEL, "prompt": "x" * 50_000_000, "max_tokens": 1})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
