"""Lesson runs through any client: one per session and at most a few per server, the rest
refused at once with a clear line (through Gradio's queue API, as an attacker calls them); a
sweep called with null inputs is refused naming the field, not answered with an internal error."""

from __future__ import annotations

import json
import secrets
import threading
import time

import httpx

import gradio as gr
import pytest

from app.tabs.lessons.gate import LessonGate, gated
from tests.support.gradio_queue import final, queue_call
from tests.support.servers import free_port


def test_one_run_per_session_and_a_few_per_server():
    gate = LessonGate(max_runs=2)
    with gate.run("alice", "quantization"):
        with pytest.raises(gr.Error, match="Your quantization run is still going"):
            with gate.run("alice", "batch size"):
                pass
        with gate.run("bob", "batch size"):
            with pytest.raises(gr.Error, match="server is busy: 2 lesson runs"):
                with gate.run("carol", "roofline"):
                    pass
            assert gate.running == 2
    assert gate.running == 0
    with gate.run("carol", "roofline"):  # places come back, after errors too
        pass


def test_the_gate_holds_through_the_queue_api():
    gate = LessonGate(max_runs=1)
    started = threading.Event()

    def heavy(n, progress=gr.Progress()):
        started.set()
        time.sleep(3)
        return f"done {n}"

    with gr.Blocks() as demo:
        n = gr.Number(1)
        out = gr.Textbox()
        button = gr.Button("run")
        button.click(gated(heavy, "heavy", gate), n, out, api_visibility="private",
                     concurrency_limit=None)
    demo.queue()
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(),
                            prevent_thread_lock=True, quiet=True)
    try:
        index = next(iter(demo.fns))
        mine, other = secrets.token_hex(8), secrets.token_hex(8)
        first = join(url, index, [1], mine)
        assert started.wait(20)
        again = join(url, index, [2], mine)  # the same session, while its run goes
        busy = join(url, index, [3], other)  # another session: the server's one place is taken
        done = completed(url, mine, {first, again})
        assert done[first]["data"] == ["done 1"]
        assert "still going" in done[again]["error"]
        assert "server is busy" in completed(url, other, {busy})[busy]["error"]
        assert final(queue_call(url, index, [4]))["data"] == ["done 4"]  # free again
    finally:
        demo.close()


def join(url: str, index: int, data: list, session: str) -> str:
    """Join the queue with ``data`` for event ``index``; returns the event id."""
    r = httpx.post(url + "gradio_api/queue/join", timeout=30, json={
        "data": data, "fn_index": index, "session_hash": session, "event_data": None,
        "trigger_id": None})
    assert r.status_code == 200, r.text
    return r.json()["event_id"]


def completed(url: str, session: str, events: set) -> dict:
    """Read the session's one queue stream until every event of ``events`` completed; returns
    each one's ``output``."""
    out = {}
    with httpx.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session},
                      timeout=30) as resp:
        for line in resp.iter_lines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed" and msg.get("event_id") in events:
                    out[msg["event_id"]] = msg["output"]
                    if set(out) == events:
                        return out
    return out


def test_a_sweep_with_null_inputs_is_refused_by_name(engine):
    from app.tabs.lessons import build_lessons

    with gr.Blocks() as demo:
        with gr.Tab("Lessons"):
            build_lessons(engine)
    handlers = {getattr(f.fn, "__name__", ""): f.fn for f in demo.fns.values()}
    with pytest.raises(gr.Error, match=r"longest prompt \(tokens\) must be an integer, got None"):
        handlers["on_sweep"](None, None)
    with pytest.raises(gr.Error, match="runs per length must be one of 1, 2, 3, got 7"):
        handlers["on_sweep"](256, 7)
    with pytest.raises(gr.Error, match="new tokens must be an integer, got 'x'; it must be from 20 to 500"):
        handlers["on_share"]("x", None)


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_a_finished_run_gives_its_memory_back():
    """A run that leaves ~300 MB of small objects in a reference cycle (as a lesson's model
    variants and engines do) hands them back to the system when its gate closes: collected,
    and the freed heap trimmed, so the server's resident memory returns near where it was."""
    gate = LessonGate(max_runs=1)

    def lesson(request=None):
        holder = {"blocks": [bytearray(2000) for _ in range(150_000)]}  # ~300 MB on the heap
        holder["self"] = holder  # a cycle: only the collector frees it
        grown = _resident_bytes() - before
        return grown

    before = _resident_bytes()
    grown = gated(lesson, "memory", gate)()
    after = _resident_bytes()
    assert grown > 250 * 1024**2, grown
    assert after - before < 60 * 1024**2, (before, after, grown)
