"""The page's HTML starts with the status tracker's frame wrapper; nothing else changes."""

from __future__ import annotations

import asyncio

from app.server.page_head import TRACKER_FRAMES_JS, PageHead

PAGE = b"<!doctype html><html><head><title>x</title></head><body>page</body></html>"


def _served(body: bytes, kind: bytes = b"text/html; charset=utf-8", path: str = "/", method: str = "GET",
            chunks: int = 1, extra: list | None = None) -> tuple[dict, bytes]:
    async def app(scope, receive, send):
        headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())] + (extra or [])
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        step = max(1, len(body) // chunks)
        parts = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
        for i, part in enumerate(parts):
            await send({"type": "http.response.body", "body": part, "more_body": i < len(parts) - 1})

    sent: list = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    asyncio.run(PageHead(app)(scope, receive, send))
    start = sent[0]
    return dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def test_the_page_gets_the_script_first_in_its_head_with_its_new_length():
    headers, body = _served(PAGE, chunks=5)
    assert body.startswith(b"<!doctype html><html><head>" + TRACKER_FRAMES_JS.encode() + b"<title>")
    assert int(headers[b"content-length"]) == len(body) == len(PAGE) + len(TRACKER_FRAMES_JS.encode())


def test_other_routes_and_bodies_pass_unchanged():
    assert _served(PAGE, path="/config")[1] == PAGE
    assert _served(PAGE, method="HEAD")[1] == PAGE
    assert _served(b'{"head": "<head>"}', kind=b"application/json")[1] == b'{"head": "<head>"}'
    compressed = _served(PAGE, extra=[(b"content-encoding", b"gzip")])
    assert compressed[1] == PAGE and compressed[0][b"content-length"] == str(len(PAGE)).encode()
