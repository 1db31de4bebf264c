"""The page's server sets Gradio's environment before its queue is made."""

from __future__ import annotations

import gradio as gr

from app.server.launch import GRADIO_ENV, set_gradio_env


def test_gradios_queue_no_longer_rebuilds_its_analytics_summary_after_every_event(monkeypatch):
    for key in GRADIO_ENV:  # restored after the test, whatever they were
        monkeypatch.setenv(key, "unset")
        monkeypatch.delenv(key)
    set_gradio_env()
    with gr.Blocks() as demo:
        gr.Textbox()
    demo.queue()
    queue = demo._queue
    records = [{"function": "on_tick", "status": "success", "process_time": 0.01, "time": float(i)}
               for i in range(2000)]
    queue.events_recorded = len(records)
    # Gradio's default (every event) would build a pandas frame of all 2,000 records here
    assert queue.compute_analytics_summary(records) == {"functions": {}}
    monkeypatch.setenv("GRADIO_ANALYTICS_CACHE_FREQUENCY", "7")
    set_gradio_env()  # a value the user set is kept
    with gr.Blocks() as mine:
        gr.Textbox()
    mine.queue()
    assert mine._queue.ANAYLTICS_CACHE_FREQUENCY == 7
    mine._queue.events_recorded = len(records)
    assert mine._queue.compute_analytics_summary(records)["functions"]["on_tick"]["total_requests"] == 2000
