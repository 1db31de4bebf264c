"""Events whose progress is hidden show it on no component, so the browser's loading-status
refresh (every message of every event, for every component an event it ran tracked) leaves
their outputs out (app.server.progress)."""

from __future__ import annotations

import gradio as gr

from app.page import build_demo
from app.server.progress import untrack_hidden_progress
from app.state.playground import Playground
from tests.support.fakes import FakeEngine


def test_every_hidden_progress_event_of_the_page_tracks_no_component(tmp_path):
    demo = build_demo(Playground(FakeEngine(), trace_dir=tmp_path, monitor=False))
    deps = demo.config["dependencies"]
    hidden = [d for d in deps if d.get("backend_fn") and d["show_progress"] == "hidden"]
    # the Playground's stream, its timer and Clear among them, and nothing of theirs is tracked
    assert len(hidden) > 30
    assert all(d["show_progress_on"] == [] for d in hidden), \
        [d["id"] for d in hidden if d["show_progress_on"] != []]
    generate = [d for d in hidden if any(str(t[1]) == "click" for t in d["targets"])
                and len(d["outputs"]) > 5]
    assert generate, "Generate's stream is among them"
    # an event that shows its progress keeps its own targets (a lesson's plot while it runs)
    shown = [d for d in deps if d.get("backend_fn") and d["show_progress"] != "hidden"]
    assert shown and all(d["show_progress_on"] is None or d["show_progress_on"] for d in shown)


def test_a_target_named_by_the_event_is_kept():
    with gr.Blocks() as demo:
        box, out = gr.Textbox(), gr.Textbox()
        box.change(lambda x: x, box, out, show_progress="hidden")
        box.submit(lambda x: x, box, out, show_progress="hidden", show_progress_on=[box])
        box.blur(lambda x: x, box, out)  # shows its progress: untouched
        changed = untrack_hidden_progress(demo)
    assert len(changed) == 1
    on = [d["show_progress_on"] for d in demo.config["dependencies"]]
    assert on == [[], [box._id], None]
