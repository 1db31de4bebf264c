"""A run's frames over the page's own route (:mod:`app.state.live_feeds`,
:mod:`app.server.live_route`): what goes by the feed, what still goes by Gradio, and what
happens when nobody reads the feed or its reader goes away."""

from __future__ import annotations

import asyncio
import json
import threading

import gradio as gr

from app.server.live_route import LiveRoute
from app.state.live_feeds import BROKEN, LIVE_ROUTE, LiveFeeds
from app.state.playground import Playground
from app.tabs.playground import events as wiring, frames as schema, handlers
from tests.support.fakes import FakeEngine

HELD = {"chat": [], "completion": "", "message": "Count:"}
AT = {k: 1 + i for i, k in enumerate(schema.STREAM_KEYS)}


def _lines(text: str) -> list[dict]:
    """The numbered frames among JSON lines (a log's, or a feed's)."""
    return [f for f in (json.loads(x) for x in text.split("\n") if x.startswith("{")) if "_n" in f]


def _drain(loop, queue) -> list:
    loop.run_until_complete(asyncio.sleep(0))  # run the puts the handler's thread scheduled
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out


def _run(tmp_path, monkeypatch, read: bool, break_after: int | None = None):
    """One raw-mode run with a feed (a text frame per token), read from its first frame on
    (``read``), its reader gone after ``break_after`` frames. Returns ``(Gradio yields, feed
    lines, feed)``."""
    monkeypatch.setattr(handlers, "TEXT_EVERY_S", 0.0)
    pg = Playground(FakeEngine("slow"), trace_dir=tmp_path, monitor=False)
    feed = pg.live_feeds.open()
    loop = asyncio.new_event_loop()
    frames = handlers.generate(pg, "sess", "raw", "Count:", [], "", 1.0, 1.0, 0, 0.0, 1.0, 32, -1, True)

    def breaking(frames):
        for i, frame in enumerate(frames):
            if i == break_after:
                feed.broke()
            yield frame

    gen = wiring.live_updates(breaking(frames), "run-1", dict(HELD), feed=feed)
    outs = [next(gen)]
    queue = pg.live_feeds.attach(feed.token, loop)[1] if read else None
    outs += list(gen)
    pg.live_feeds.close(feed)
    lines = [x for x in _drain(loop, queue) if x is not None] if read else []
    loop.close()
    return outs, lines, feed


def _completion(frames: list[dict]) -> str:
    text = ""
    for f in frames:
        op = f.get("completion")
        if op:
            text = op["set"] if "set" in op else text + op["app"]
    return text


def test_a_read_feed_carries_every_frame_after_the_first_and_gradio_only_what_its_outputs_need(tmp_path, monkeypatch):
    outs, lines, feed = _run(tmp_path, monkeypatch, read=True)
    first = _lines(outs[0][0])
    assert first[0]["_feed"] == feed.path and feed.path.startswith(LIVE_ROUTE)
    sent = _lines("".join(lines))
    assert [f["_n"] for f in first + sent] == list(range(len(first) + len(sent)))  # none lost
    assert len(sent) >= 8 and "Finished" in sent[-1]["status"]["set"]
    # Gradio: the first frame, the last (the downloads, the final text) and the closing message;
    # the log cut back to its first line once the feed carries the frames
    assert len(outs) == 3 and outs[1][0] == outs[2][0] == "run-1\n"
    final = outs[1][AT["completion"]]
    assert outs[0][AT["completion"]] == gr.skip() and final.startswith("Count:") and len(final) > 6
    assert _completion(first + sent) == final == outs[2][AT["completion"]]  # the ops draw the same text
    assert all(out[AT["chat"]] == gr.skip() for out in outs[:-1])


def test_the_completions_appends_say_where_they_go_in_the_browsers_units():
    """An append to the completion carries the length it extends, counted as the browser counts
    (UTF-16: an emoji is two), so a box that missed a frame can tell and append nothing."""
    from app.render.live_ops import LiveEncoder

    enc = LiveEncoder(append=frozenset({"completion"}), counted=frozenset({"completion"}))
    ops = [enc.ops({"completion": t})["completion"] for t in ("Hi", "Hi 😀", "Hi 😀 ok", "new")]
    assert ops == [{"set": "Hi"}, {"app": " 😀", "at": 2}, {"app": " ok", "at": 5}, {"set": "new"}]
    plain = LiveEncoder(append=frozenset({"tokens"}))  # the chips' appends stay as they were
    assert plain.ops({"tokens": "a"}) and plain.ops({"tokens": "ab"}) == {"tokens": {"app": "b"}}


def test_an_unread_feed_leaves_every_frame_to_gradio(tmp_path, monkeypatch):
    outs, _, feed = _run(tmp_path, monkeypatch, read=False)
    assert feed.state == "closed"
    logged = _lines(outs[-2][0])
    assert [f["_n"] for f in logged] == list(range(len(logged))) and len(logged) >= 8
    assert all(out[0] != "run-1\n" for out in outs[:-1])  # every frame's log by Gradio, none cut
    assert _completion(logged) == outs[-1][AT["completion"]]


def test_frames_go_by_gradio_again_when_the_feeds_reader_goes_away(tmp_path, monkeypatch):
    outs, lines, feed = _run(tmp_path, monkeypatch, read=True, break_after=4)
    assert feed.state == "closed"
    by_feed = _lines("".join(lines))
    by_log = _lines(outs[-2][0])  # the log after the break: every frame of the run so far
    assert by_feed and max(f["_n"] for f in by_feed) < 4
    numbers = {f["_n"] for f in by_feed} | {f["_n"] for f in by_log}
    assert numbers == set(range(max(numbers) + 1)) and len(outs) > 4
    assert "Finished" in by_log[-1]["status"]["set"]


def test_a_chat_run_has_no_feed(tmp_path):
    pg = Playground(FakeEngine(), trace_dir=tmp_path, monitor=False)
    frames = handlers.generate(pg, "sess", "chat", "Hi", [], "", 1.0, 1.0, 0, 0.0, 1.0, 8, -1, True)
    outs = list(wiring.live_updates(frames, "r", {"completion": "", "message": "Hi", "history": []}))
    assert not [f for out in outs for f in _lines(out[0]) if "_feed" in f or "completion" in f]


def test_feeds_are_bounded_named_unguessably_and_read_once():
    feeds = LiveFeeds(limit=2)
    a, b = feeds.open(), feeds.open()
    assert feeds.open() is None and len(feeds) == 2  # a run past the limit streams by Gradio
    assert a.token != b.token and len(a.token) >= 24
    loop = asyncio.new_event_loop()
    assert feeds.attach(a.token, loop) is not None and feeds.attach(a.token, loop) is None
    assert feeds.attach("no-such-token", loop) is None
    feeds.close(a)
    assert len(feeds) == 1 and feeds.attach(b.token + "x", loop) is None
    assert not b.put("{}\n")  # not read: the caller sends it by Gradio
    loop.close()


class _Client:
    """An ASGI client of one GET: what the route sent, and a switch to go away."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.gone = asyncio.Event()

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    async def receive(self) -> dict:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    @property
    def body(self) -> str:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body").decode()

    @property
    def status(self) -> int:
        return next(m["status"] for m in self.sent if m["type"] == "http.response.start")


def _get(route, path: str, client: _Client):
    return route({"type": "http", "method": "GET", "path": path, "headers": []}, client.receive, client.send)


def test_the_route_streams_a_runs_lines_until_it_ends_and_once_only():
    feeds = LiveFeeds()
    feed = feeds.open()

    async def main():
        route = LiveRoute(app=None, feeds=feeds)
        client = _Client()
        task = asyncio.ensure_future(_get(route, feed.path, client))
        await asyncio.sleep(0.05)
        assert feed.read and client.status == 200
        putter = threading.Thread(target=lambda: [feed.put(f'{{"_n":{i}}}\n') for i in range(5)])
        putter.start()
        putter.join()
        await asyncio.sleep(0.05)
        assert [f["_n"] for f in _lines(client.body)] == [0, 1, 2, 3, 4]  # as they come, in order
        feeds.close(feed)
        await asyncio.wait_for(task, 2)
        assert client.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
        again = _Client()
        await _get(route, feed.path, again)
        assert again.status == 404  # a feed is read once
        unknown = _Client()
        await _get(route, LIVE_ROUTE + "nothing", unknown)
        assert unknown.status == 404 and "detail" in json.loads(unknown.body)

    asyncio.run(main())


def test_a_reader_going_away_breaks_the_feed():
    feeds = LiveFeeds()
    feed = feeds.open()

    async def main():
        client = _Client()
        task = asyncio.ensure_future(_get(LiveRoute(app=None, feeds=feeds), feed.path, client))
        await asyncio.sleep(0.05)
        assert feed.put('{"_n":0}\n')
        await asyncio.sleep(0.05)
        client.gone.set()
        await asyncio.wait_for(task, 2)
        assert feed.state == BROKEN and not feed.put('{"_n":1}\n')  # the next frame goes by Gradio

    asyncio.run(main())


def test_other_paths_pass_through():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["path"])

    async def main():
        route = LiveRoute(app=app, feeds=LiveFeeds())
        await route({"type": "http", "method": "GET", "path": "/config", "headers": []}, None, None)
        await route({"type": "http", "method": "POST", "path": LIVE_ROUTE + "x", "headers": []}, None, None)

    asyncio.run(main())
    assert seen == ["/config", LIVE_ROUTE + "x"]
