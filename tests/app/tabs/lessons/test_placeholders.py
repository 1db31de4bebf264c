"""Before a run, the prefill, quantization and speculative lessons' plots already show what they
will hold, as the KV cache lesson's does: their panels and axis titles, and a note naming the
very button that fills them."""

import json

import gradio as gr
import pytest

from app.tabs.lessons import build_lessons

# the lesson's plot, the button that fills it, and a word of what the plot will show
PLOTS = [("sweep_plot", "sweep_run", "prompt tokens"), ("share_plot", "share_run", "seconds"),
         ("quant_plot", "quant_run", "fp32"), ("spec_plot", "spec_run", "summarise with quotes")]


@pytest.fixture(scope="module")
def lessons(engine):
    with gr.Blocks():
        with gr.Tab("Lessons"):
            return build_lessons(engine)


def _figure(plot) -> dict:
    value = plot.value
    return json.loads(value["plot"]) if isinstance(value, dict) and "plot" in value else value


@pytest.mark.parametrize("plot,button,shows", PLOTS)
def test_an_empty_plot_names_its_button_and_shows_its_axes(lessons, plot, button, shows):
    fig = _figure(lessons[plot])
    assert fig, f"{plot} is blank before a run"
    label = lessons[button].value
    notes = [a["text"] for a in fig["layout"].get("annotations", [])]
    assert any(f"Press “{label}”" in n for n in notes), (label, notes)
    # the axes say what the plot will hold: an axis title, or the categories it will have
    text = json.dumps(fig, ensure_ascii=False)
    assert shows in text
    for trace in fig["data"]:  # no measured value is drawn before a run (categories only)
        values = list(trace.get("x") or []) + list(trace.get("y") or [])
        assert not [v for v in values if isinstance(v, (int, float))], trace
