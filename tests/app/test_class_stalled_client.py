"""A page that stops reading its stream holds up nobody: the engine never waits on a page.

Four pages run the page's own Generate event through the Gradio queue, as a browser does
(``/gradio_api/queue/join`` + the session's event stream), on the real embedded model. One of
them reads its first frame, then stops reading for at least 10 s. Meanwhile the engine decodes
all four requests in the same steps (so the others' inter-token latency is that of the same
batch, stalled reader or not), finishes them, stalled one included, and frees every KV block,
all before the stalled page reads again; then that page still gets its answer.

Also: the shared frame budget (``app.frame_budget``) stretches every page's redraw intervals once
more pages stream than get the full cadence, and counts the frames the teacher sees.
"""

from __future__ import annotations

import json
import secrets
import threading
import time

import httpx
import pytest

from app.state.frame_budget import FrameBudget
from app.state.playground import Playground
from app.state.shared_views import shared
from app.tabs.playground import handlers
from engine import LLMEngine
from tests.support.fakes import FakeEngine, FakeHandle, make_events, make_output
from tests.support.servers import launch

STALL_S = 10.0
TOKENS = 16
PROMPTS = ["1, 2, 3, 4,", "10, 20, 30,", "2, 4, 6, 8,", "5, 10, 15,"]


def _generate_event(demo) -> tuple[int, list]:
    """The Generate button's ``fn_index`` and its input components."""
    hits = [(i, f) for i, f in demo.fns.items() if getattr(f.fn, "__name__", None) == "on_generate"
            and any(getattr(c, "elem_id", None) == "prompt" for c in f.inputs)]
    assert hits, "no Generate event"
    return hits[0][0], list(hits[0][1].inputs)


def _payload(inputs, prompt: str) -> list:
    """The event's data for a raw greedy completion of ``prompt`` (as the page's sidebar sets it)."""
    import gradio as gr

    from app.tabs.playground import settings

    over = {"prompt": prompt, "settings": settings.replaced(
        next(c.value for c in inputs if getattr(c, "elem_id", None) == "settings"),
        mode="raw", temperature=0.0, rep_penalty=1.0, max_tokens=TOKENS, seed=0)}
    return [None if isinstance(c, gr.State) else over.get(getattr(c, "elem_id", None), c.value)
            for c in inputs]


def _page(url: str, index: int, data: list, out: dict, stall=None) -> None:
    """One page: join the event, read the stream to its end; ``stall()`` (when given) is
    called after the first frame and the stream is not read until it returns."""
    session = secrets.token_hex(8)
    with httpx.Client(timeout=300) as http:
        r = http.post(url + "gradio_api/queue/join", json={"data": data, "fn_index": index,
                                                           "session_hash": session,
                                                           "event_data": None, "trigger_id": None})
        r.raise_for_status()
        event_id = r.json()["event_id"]
        with http.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session}) as resp:
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") not in (None, event_id):
                    continue
                if msg.get("msg") in ("process_generating", "process_completed"):
                    out["frames"] = out.get("frames", 0) + 1
                    if out["frames"] == 1 and stall is not None:
                        stall()
                if msg.get("msg") == "process_completed":
                    out["success"] = bool(msg.get("success"))
                    out["done_s"] = time.monotonic()
                    return


@pytest.fixture
def page(engine, tmp_path):
    pg = Playground(engine, trace_dir=tmp_path / "traces", monitor=False)
    demo, url = launch(pg, concurrency=16)
    yield demo, url, engine
    demo.close()
    pg.close()


@pytest.mark.slow  # the stalled page waits at least STALL_S = 10 s, then four requests finish
def test_a_stalled_page_holds_up_neither_the_engine_nor_the_other_pages(page):
    demo, url, engine = page
    assert isinstance(engine, LLMEngine)
    index, inputs = _generate_event(demo)
    start_step = engine.recent_steps[-1].step_id if engine.recent_steps else -1
    seen = {"stall_start": None}
    done_in_engine = {}

    def stall() -> None:
        seen["stall_start"] = time.monotonic()
        seen["steps_at_stall"] = len(engine.recent_steps)
        end = time.monotonic() + STALL_S
        # not reading: at least STALL_S, and until the engine has finished every request
        while time.monotonic() < end or engine.stats().running or engine.stats().waiting:
            assert time.monotonic() < end + 240, "the engine did not finish while a page stalled"
            time.sleep(0.05)
        done_in_engine["stats"] = engine.stats()
        done_in_engine["steps"] = [(b.step_id, list(b.request_ids)) for b in engine.recent_steps
                                   if b.step_id > start_step]
        seen["stall_end"] = time.monotonic()

    outs = [{} for _ in PROMPTS]
    threads = [threading.Thread(target=_page, args=(url, index, _payload(inputs, p), outs[i],
                                                     stall if i == 0 else None), daemon=True)
               for i, p in enumerate(PROMPTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(360)
    stalled, others = outs[0], outs[1:]
    assert all(o.get("success") for o in outs), outs
    # the others got their whole answer while the stalled page was not reading
    assert all(o["done_s"] < seen["stall_end"] for o in others), (outs, seen)
    # the engine finished every request, the stalled one too, and freed all their blocks, while
    # the stalled page still had not read past its first frame
    idle = done_in_engine["stats"]
    assert idle.running == 0 and idle.waiting == 0 and idle.blocks_used == 0
    # no request, the stalled one included, ever sat out a step: each one's tokens came from
    # consecutive engine steps, one token a step, from its prefill to its last token (so the
    # others' inter-token latency is that of the same batch as with four reading pages)
    steps_of: dict[str, list[int]] = {}
    for step_id, ids in done_in_engine["steps"]:
        for rid in ids:
            steps_of.setdefault(rid, []).append(step_id)
    assert len(steps_of) == len(PROMPTS), steps_of
    for rid, ids in steps_of.items():
        assert ids == list(range(ids[0], ids[0] + TOKENS)), (rid, ids)
    # after the stall the page still gets its final frame
    assert stalled["frames"] >= 2 and stalled["done_s"] >= seen["stall_end"]


def test_the_engine_hands_a_stalled_reader_its_events_without_waiting(engine):
    """At the engine's own level: a handle nobody iterates still gets every event and its
    output, and its blocks are freed; a handle read alongside it decodes in the same steps."""
    from engine import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=TOKENS, repetition_penalty=1.0)
    idle = engine.submit(PROMPTS[0], params, raw=True)   # never read until it has ended
    read = engine.submit(PROMPTS[1], params, raw=True)
    got = list(read)
    out = idle.result(timeout=240)
    assert len(got) == TOKENS and out.metrics.output_tokens == TOKENS
    assert len(idle.events) == TOKENS and len(list(idle)) == TOKENS  # queued, none lost
    assert engine.stats().blocks_used == 0
    shared_steps = {e.batch.step_id for e in got if e.phase == "decode"} & \
                   {e.batch.step_id for e in idle.events if e.phase == "decode"}
    assert len(shared_steps) >= TOKENS - 3


# ---- the frame budget ----------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_frame_budget_stretches_intervals_beyond_the_full_rate_pages():
    clock = Clock()
    budget = FrameBudget(full_rate_pages=4, clock=clock)
    tokens = [budget.open() for _ in range(4)]
    assert budget.stretch() == 1.0
    tokens += [budget.open() for _ in range(26)]
    assert budget.stretch() == pytest.approx(30 / 4)
    for _ in range(10):
        clock.t += 0.5
        for tok in tokens:
            budget.frame(tok)
    n, fps = budget.summary()
    assert n == 30 and fps == pytest.approx(10 * 30 / 5.0 / 30)  # 2 frames/s each, last 5 s
    for tok in tokens[4:]:
        budget.close(tok)
    assert budget.stretch() == 1.0 and budget.summary()[0] == 4
    with pytest.raises(ValueError, match="full_rate_pages"):
        FrameBudget(full_rate_pages=0)


class PacedHandle(FakeHandle):
    """Hands over one prepared event every ``every_s`` seconds of real time (a decode at that
    speed), then ends with the prepared output."""

    def __init__(self, rid, events, output, engine, every_s: float = 0.02):
        super().__init__(rid, [], None, engine)
        self.finished = False
        self._pending, self._out, self._every = list(events), output, every_s
        self._t0 = time.monotonic()

    def result(self, timeout=None):
        due = int((time.monotonic() - self._t0) / self._every) + 1
        while self._pending and len(self.events) < due:
            self.events.append(self._pending.pop(0))
        if not self._pending:
            self.output, self.finished = self._out, True
            return self.output
        time.sleep(min(timeout or self._every, self._every))
        raise TimeoutError


class PacedEngine(FakeEngine):
    def submit(self, prompt, params, raw=False, use_kv_cache=True, **kw):
        handle = super().submit(prompt, params, raw, use_kv_cache, **kw)
        events = make_events(rid=handle.request_id, texts=tuple(f" {k}" for k in range(40)))
        return PacedHandle(handle.request_id, events, make_output(events), self)


def test_a_class_of_streams_gets_fewer_frames_each_but_every_token(tmp_path):
    """A stream while 29 other pages stream gets its text less often than a stream alone (its
    redraw intervals stretch), and still every token: the same final answer."""

    def frames_of(n_pages: int) -> list[dict]:
        pg = Playground(PacedEngine(), trace_dir=tmp_path / f"t{n_pages}", monitor=False)
        views = shared(pg)
        tokens = [views.frames.open() for _ in range(n_pages - 1)]  # the rest of the class
        try:
            return list(handlers.generate(pg, "s0", "raw", "Hi", [], "", 0.0, 1.0, 0, 0.0, 1.0, 40, 0, True))
        finally:
            for tok in tokens:
                views.frames.close(tok)
            pg.close()

    alone, in_class = frames_of(1), frames_of(30)
    assert len(in_class) < len(alone)
    assert in_class[-1]["busy"] is False and alone[-1]["busy"] is False
    assert in_class[-1]["completion"] == alone[-1]["completion"] == "Hi" + "".join(f" {k}" for k in range(40))


def test_the_batching_section_shows_the_teacher_the_open_streams_and_their_frame_rate(tmp_path):
    from app.render import batch as batch_view

    pg = Playground(FakeEngine(), trace_dir=tmp_path / "traces", monitor=False)
    views = shared(pg)
    try:
        streams = [views.frames.open() for _ in range(3)]
        for tok in streams:
            for _ in range(5):
                views.frames.frame(tok)
        section = views.batch_section()
        assert section.streaming.pages == 3
        assert section.streaming.fps == pytest.approx(5 / 5.0)  # 5 frames each in the 5 s window
        line = batch_view.stats_html(section.stats, [], streaming=section.streaming)
        assert "pages streaming</span> <b>3</b>" in line and "frames/s per page</span> <b>1.0</b>" in line
        views.frames.close(streams[0])
        assert views.batch_section().streaming.pages == 2  # redrawn: the class changed
    finally:
        pg.close()


def test_a_class_finishing_at_once_prunes_old_traces_without_failing_a_request(tmp_path, monkeypatch):
    """Pages finishing at once each write a trace and prune the oldest: none of them may fail
    because another page's prune removed a file it had just listed."""
    from app.state import playground as service

    monkeypatch.setattr(service, "KEEP_TRACES", 2)
    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path / "traces", monitor=False)
    events = make_events()
    output = make_output(events)
    errors, written = [], []
    go = threading.Barrier(16)

    def page(k: int) -> None:
        go.wait()
        for i in range(8):
            try:
                written.append(pg.write_trace(output, events, f"s{k}-{i % 2}"))
            except Exception as exc:  # noqa: BLE001 - what the test looks for
                errors.append(exc)

    threads = [threading.Thread(target=page, args=(k,)) for k in range(16)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[:3]
        assert len(written) == 16 * 8 and all(w is not None for w in written)
        assert len(list((tmp_path / "traces").glob("*/trace_*"))) <= 2 * 2
    finally:
        pg.close()
