"""Malformed page events cost one log line, not a traceback; ``queue/data`` of an unknown
session is a clean 404 (it was a truncated 200 and an "Exception in ASGI application"
traceback) and ``queue/join`` of an unknown event a 422 (it was a 500 and a traceback)."""

from __future__ import annotations

import logging

import gradio as gr
import httpx
import pytest

from app.server.errors import guard
from app.server.launch import launch
from tests.support.gradio_queue import final, queue_call
from tests.support.servers import free_port


@pytest.fixture
def page():
    with gr.Blocks() as demo:
        text, n = gr.Textbox(), gr.Number(2)
        choice, out = gr.Dropdown(["a", "b"], value="a"), gr.Textbox()
        gr.Button("x").click(guard(lambda t, k: t * int(k)), [text, n], out, api_visibility="private")
        gr.Button("y").click(guard(lambda c: c), [choice], out, api_visibility="private")
    demo.queue()
    url, _ = launch(demo, "127.0.0.1", free_port())
    yield url
    demo.close()


def test_malformed_events_log_one_line_each(page, caplog, capfd):
    caplog.set_level(logging.DEBUG, logger="app")
    capfd.readouterr()
    few = final(queue_call(page, 0, [1]))  # one input of two
    off_list = final(queue_call(page, 1, ["zzz"]))  # not among the dropdown's choices
    assert "zzz is not in the list of choices" in off_list["error"]
    assert few.get("error") is None  # Gradio tells the client no more than before
    lines = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 2 and all(r.exc_info is None for r in lines)
    assert "ValueError" in lines[0].getMessage() and "enough input values" in lines[0].getMessage()
    assert len(lines[0].getMessage()) < 400
    assert "Traceback" not in capfd.readouterr().err


def test_unknown_sessions_and_events_are_refused_cleanly(page, capfd):
    capfd.readouterr()
    r = httpx.get(page + "gradio_api/queue/data", params={"session_hash": "nosuch"}, timeout=10)
    assert r.status_code == 404 and "no such session" in r.json()["detail"]
    r = httpx.post(page + "gradio_api/queue/join", timeout=10,
                   json={"data": [], "fn_index": 99999, "session_hash": "abc"})
    assert r.status_code == 422 and "fn_index" in r.json()["detail"]
    assert final(queue_call(page, 1, ["b"]))["data"] == ["b"]  # real events still run
    assert "Traceback" not in capfd.readouterr().err
