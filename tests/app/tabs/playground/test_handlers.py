"""app.tabs.playground.handlers on a fake engine: Generate's frames, refusals, errors and Stop."""

import json
from pathlib import Path

import pytest

from app.state.playground import Playground
from app.tabs.playground import handlers
from tests.support.fakes import FakeEngine


def _run(pg, message="Hi", mode="chat", history=None, notes=None, **over):
    settings = dict(temperature=0.7, top_p=0.95, top_k=50, min_p=0.0, repetition_penalty=1.1,
                    max_tokens=32, seed=-1, use_kv_cache=True)
    settings.update(over)
    return list(handlers.generate(pg, "sess", mode, message, history, "Be brief.", **settings,
                                  notify=(notes.append if notes is not None else None)))


def test_generate_streams_frames_and_ends_idle(tmp_path):
    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    frames = _run(pg, history=[{"role": "user", "content": [{"type": "text", "text": "Earlier"}]},
                               {"role": "assistant", "content": "Sure"}])
    assert frames[0]["busy"] is True and frames[0]["message"] == ""
    last = frames[-1]
    assert last["busy"] is False
    assert last["chat"][-1] == {"role": "assistant", "content": "Hello, world!"}
    assert last["chat"][-2] == {"role": "user", "content": "Hi"}
    assert "Finished" in last["status"] and "status-ok" in last["status"]
    assert len(last["latency"].data[1].x) == 3
    json_path, csv_path = last["trace"]
    assert json.loads(Path(json_path).read_text())["finish_reason"] == "stop"
    assert Path(csv_path).read_text().splitlines()[0].startswith("request_id,phase")
    prompt, params, raw, kv = eng.submitted[0]
    assert prompt == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Earlier"},
                      {"role": "assistant", "content": "Sure"}, {"role": "user", "content": "Hi"}]
    assert raw is False and kv is True and params.seed is None and params.top_k == 50
    assert pg.active_count() == 0


def test_generate_raw_mode_fills_the_completion(tmp_path):
    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    last = _run(pg, message="Once", mode="raw", use_kv_cache=False, seed=7)[-1]
    assert last["completion"] == "OnceHello, world!"
    prompt, params, raw, kv = eng.submitted[0]
    assert prompt == "Once" and raw is True and kv is False and params.seed == 7


@pytest.mark.parametrize("script,message,over,expect", [
    ("ok", "   ", {}, "prompt is empty"),
    ("ok", "Hi", {"top_p": 1.5}, "top_p"),
    ("ok", "Hi", {"max_tokens": 2.5}, "max_tokens"),
    ("too_long", "Hi", {}, "context window"),
    ("queue_full", "Hi", {}, "queue is full"),
])
def test_bad_input_gives_a_visible_message(tmp_path, script, message, over, expect):
    pg = Playground(FakeEngine(script), trace_dir=tmp_path, monitor=False)
    notes = []
    frames = _run(pg, message=message, notes=notes, **over)
    assert len(frames) == 1 and frames[0]["busy"] is False
    assert "status-error" in frames[0]["status"] and expect in frames[0]["status"]
    assert notes and expect in notes[0]
    pg.engine.script = "ok"  # the next request works
    assert _run(pg)[-1]["chat"][-1]["content"] == "Hello, world!"


def test_engine_error_mid_stream_is_shown(tmp_path):
    pg = Playground(FakeEngine("error"), trace_dir=tmp_path, monitor=False)
    notes = []
    last = _run(pg, notes=notes)[-1]
    assert "status-error" in last["status"] and "NaN" in last["status"]
    assert notes and "NaN" in notes[0]
    assert last["busy"] is False


def test_stop_aborts_in_the_engine(tmp_path):
    from engine.output.handle import RequestHandle

    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    assert handlers.stop(pg, "sess") is False
    running = RequestHandle("req-9", eng.abort, lambda rid: 0)
    pg._active["sess"] = {running}
    assert handlers.stop(pg, "sess") is True
    assert eng.aborted == ["req-9"] and running.abort_requested


def test_stop_status_comes_from_the_stream_so_the_final_line_is_last(tmp_path):
    """Stop's click handler writes nothing to the page: the request's stream says
    "Stopping…" and then its final line, in that order, whatever the timing."""
    eng = FakeEngine("slow")
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    gen = handlers.generate(pg, "sess", "raw", "Count:", [], "", 1.0, 1.0, 0, 0.0, 1.0, 32, -1, True)
    next(gen)  # queued frame
    next(gen)  # the first token
    assert handlers.stop(pg, "sess") is True
    rest = list(gen)
    statuses = [f["status"] for f in rest if "status" in f]
    assert "Stopping" in statuses[0]
    assert "stopped by you" in statuses[-1] and rest[-1]["busy"] is False
    assert eng.aborted == ["req-0"]
    assert not any("Stopping" in x for x in statuses[1:])


def test_make_params_ranges():
    p = handlers.make_params(0.0, 1.0, 0, 0.0, 1.0, 16.0, 3.0)
    assert p.max_tokens == 16 and p.seed == 3 and p.greedy
    assert handlers.make_params(1, 1, -1, 0, 1, 4, -1).seed is None
    for bad in (dict(temperature=-1), dict(top_p=0), dict(repetition_penalty=0), dict(max_tokens=0),
                dict(min_p=2), dict(top_k=-5)):
        args = dict(temperature=1, top_p=1, top_k=0, min_p=0, repetition_penalty=1, max_tokens=4, seed=-1)
        args.update(bad)
        with pytest.raises(ValueError, match=next(iter(bad))):
            handlers.make_params(**args)


def test_page_refusals_name_the_sidebar_label():
    from app.tabs.playground.handlers import make_params, page_message

    with pytest.raises(ValueError) as info:
        make_params(0.7, 0.95, 50, 0.0, 1.1, 2.5, -1)
    assert page_message(info.value).startswith("max new tokens (max_tokens) must be")
    with pytest.raises(ValueError) as info:
        make_params(0.7, 7.0, 50, 0.0, 1.1, 16, -1)
    assert page_message(info.value).startswith("top-p (top_p) must be")
    assert page_message(ValueError("prompt is empty")) == "prompt is empty"


def test_html_in_a_chat_is_shown_as_typed_and_read_as_typed(tmp_path):
    """A prompt about ``<b>`` and ``<img>`` reaches the model as typed, and the chat box shows
    those characters (escaped for its Markdown) instead of rendering them; the conversation kept
    for the next turn stays plain."""
    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    message = "What do <b>bold</b> & <img src=x> do? Compare `<i>`."
    last = _run(pg, message=message, history=[{"role": "assistant", "content": "a <br> tag"}])[-1]
    assert eng.submitted[0][0][-1] == {"role": "user", "content": message}
    assert last["chat"][-2]["content"] == "What do &lt;b>bold&lt;/b> &amp; &lt;img src=x> do? Compare `<i>`."
    assert last["chat"][0]["content"] == "a &lt;br> tag"
    assert last["history"][-2] == {"role": "user", "content": message}
    assert last["history"][0] == {"role": "assistant", "content": "a <br> tag"}
