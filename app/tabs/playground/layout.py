"""The Playground tab's layout: the conversation and the answer's tokens and numbers on the
first screen, then the live panels, the batching section, memory and device, the rolling table
and the trace downloads. Output components get the attribute names of the frame schema
(:mod:`app.tabs.playground.frames`)."""

from __future__ import annotations

import gradio as gr

from app.render import batch as batch_view, cards, figures
from app.render import structured
from app.render.fmt import fmt_int
from app.render.tokens import inspector_template, tooltip_js
from app.server.assets import load_examples
from app.server.errors import guard
from app.tabs.playground.live_channel import channel, html_panel
from app.tabs.playground.plot_panel import plot_panel, serve_plotly_js

INTRO = (
    "Type a prompt and watch an LLM work. **Prefill** reads the whole prompt in one forward pass "
    "(a long one in chunks of a few hundred tokens, one engine step each); "
    "**decode** then adds one token per step, reusing the **KV cache** (the keys and values of "
    "every earlier token). Every panel on this page is measured on this machine while the answer "
    "streams."
)
BATCH_INTRO = (
    "### Continuous batching: your request shares the engine with everyone else's\n"
    "Each **engine step** is one forward pass for every running request, yours and other users'; new "
    "requests join between steps and finished ones leave. Their keys and values live in fixed-size "
    "**blocks** of one shared pool (PagedAttention): a request's **block table** maps its logical blocks "
    "to physical blocks anywhere in the pool, so memory is taken as tokens arrive instead of being reserved "
    "for the longest possible answer. Generate in two browser tabs at once to see both requests share steps.")
PREFIX_SHARED = (
    "**The prefix cache is shared by every user of this server.** A request whose prompt starts "
    "like a recent one (a common system prompt) reuses its cached KV blocks and gets its first "
    "token sooner, and anyone can measure that: another user can confirm a guess of how your "
    "prompt begins by timing their own request. Don't type anything secret here.")
PREFIX_PER_SESSION = (
    "**Your prefix cache is your own.** Your requests reuse the cached KV blocks of your own earlier "
    "prompts (the same chat, the same system prompt), never another user's: each session's blocks "
    "are keyed with its own secret salt, so no one can learn how your prompt begins by timing theirs.")
PROMPT_HINT = "Write a short poem about a programmer under deadline pressure."


def first_screen(pg, empty: dict) -> dict:
    """Ask on the left; the answer's tokens and numbers on the right (a remote engine's note
    above)."""
    if pg.capabilities.remote:
        from app.remote.view import CLIENT_SIDE, NO_TRACE

        gr.Markdown(f"**Remote engine.** {CLIENT_SIDE}. {NO_TRACE}.", elem_id="remote-note")
    with gr.Row(equal_height=False, elem_id="first-screen"):
        with gr.Column(scale=5, min_width=300):
            c = _conversation(empty)
        with gr.Column(scale=5, min_width=300):
            c["stat_cards"] = html_panel(empty["cards"], "stat-cards", "cards")
            c["tokens"] = gr.HTML(empty["tokens"], html_template=inspector_template(),
                                  js_on_load=tooltip_js("tokens"), elem_id="tokens")
    return c


def _conversation(empty: dict) -> dict:
    """Chat / completion, the prompt box, the buttons and the status line (the first screen's
    left half)."""
    c = dict(
        chatbot=gr.Chatbot(show_label=False, height=180, feedback_options=None, buttons=["copy"],
                           elem_id="chatbot", placeholder="The conversation appears here."),
        completion=gr.Textbox(label="Completion: your text + the model's continuation", show_label=False, lines=7,
                              max_lines=7, interactive=False, visible="hidden", elem_id="completion",
                              placeholder="Completion: your text + the model's continuation"),
        message=gr.Textbox(label="Prompt", show_label=False, lines=2, max_lines=4, placeholder=PROMPT_HINT, elem_id="prompt",
                           container=False),
    )
    with gr.Row(elem_id="buttons"):
        c["gen_btn"] = gr.Button("Generate", variant="primary", elem_id="generate-btn", min_width=90)
        c["stop_btn"] = gr.Button("Stop", variant="stop", interactive=False, elem_id="stop-btn", min_width=70)
        c["clear_btn"] = gr.Button("Clear", elem_id="clear-btn", min_width=70)
    c["status"] = html_panel(empty["status"], "status", "status")
    c["live"] = channel("live-channel", "playground", boxes={"completion": "completion"})
    return c


def _examples(c: dict) -> None:
    """Example prompts (below the first screen: a click fills the prompt box and the mode)."""
    examples = load_examples()
    gr.Examples(examples=[[ex["mode"], ex["prompt"]] for ex in examples],
                example_labels=[ex["label"] for ex in examples], inputs=[c["mode"], c["message"]],
                label="Examples (English and 中文)")


def panels(pg, empty: dict, inputs: dict) -> dict:
    """The live Plotly panels (latency and KV cache on the first screen), the KV formula, the
    introduction and examples (``inputs``: the mode and prompt components they fill), the
    batching section, the memory and device panels, the rolling table and the trace downloads."""
    p = {}
    head = serve_plotly_js()
    with gr.Row(elem_id="live-plots"):
        p["latency"] = plot_panel(empty["latency"], "latency-plot", head, min_height=figures.LIVE_HEIGHT,
                                  live_name="latency")
        p["kv_plot"] = plot_panel(empty["kv"], "kv-plot", head, min_height=figures.LIVE_HEIGHT, live_name="kv")
    p["kv_formula"] = html_panel(empty["kv_formula"], "kv-formula", "kv_formula")
    gr.Markdown(INTRO, elem_classes=["intro"])
    _examples(inputs)
    p.update(_batching(pg, head))
    with gr.Row():
        p["memory"] = plot_panel(empty["memory"], "memory-plot", head, live_name="memory")
        p["device"] = plot_panel(figures.device_figure([], False, pg.device.reason), "device-plot", head,
                                 live_name="device")
    with gr.Row():
        with gr.Column(scale=3):
            gr.Markdown("### Recent requests (every user of this server)")
            p["rolling"] = html_panel(cards.rolling_table_html(pg.rolling_summary()), "rolling", "rolling")
            p["rolling_reset"] = gr.Button("Reset the table (for every user)", size="sm",
                                           elem_id="rolling-reset")
        with gr.Column(scale=2):
            gr.Markdown("### Trace of your last request\nOne row per engine step: phase, token, "
                        "timings, KV cache tokens and bytes (measured and formula).")
            p["json_btn"] = gr.DownloadButton("Download trace (JSON)", interactive=False, elem_id="trace-json")
            p["csv_btn"] = gr.DownloadButton("Download trace (CSV)", interactive=False, elem_id="trace-csv")
    gr.Markdown(f"<div class='footnote'>Sizes use decimal units (1 MB = 10<sup>6</sup> bytes). Context "
                f"window: {fmt_int(pg.info.context_len)} tokens. Script it with <code>gradio_client</code>: "
                f"endpoint <code>/generate</code> (see “Use via API” below).</div>")
    return p


def _batching(pg, head: str) -> dict:
    """The continuous-batching section: numbers, the live block pool and tables, recent steps."""
    stats, snapshot, steps = pg.batch_data()
    first = batch_view.batch_frame(stats, snapshot, steps, set())
    show = bool(stats.batching)
    gr.Markdown(BATCH_INTRO, elem_id="batching-intro")
    gr.Markdown(PREFIX_SHARED if pg.prefix_cache_shared else PREFIX_PER_SESSION, elem_id="prefix-cache-note")
    # drawn by the page's timer, and by the ops of the page's own answer while it streams
    b = {"batch_stats": html_panel(first["batch_stats"], "batch-stats", "batch_stats")}
    with gr.Row(equal_height=False):
        with gr.Column(scale=5):
            b["pool"] = html_panel(first["pool"], "block-pool", "pool", js=batch_view.POOL_HOVER_JS, visible=show)
            b["tables"] = html_panel(first["tables"], "block-tables", "tables", visible=show)
        with gr.Column(scale=4):
            b["strip"] = plot_panel(first["strip"], "step-strip", head, visible=show, live_name="strip")
    return b


def structure_controls() -> dict:
    """The sidebar's "Structured output" block (call inside the sidebar): a kind radio (none,
    JSON schema, regex, choice), the JSON schema examples drop-down and one code box, wired so
    the kind shows the box and the drop-down fills it.

    Returns:
        ``{"structure_kind", "structure_text"}``: the components Generate takes as inputs
        (:func:`app.render.structured.structure_from` reads their values).
    """
    gr.Markdown("### Structured output", elem_classes=["side-title"])
    kind = gr.Radio(structured.KINDS, value="none", label="Constrain the answer to", elem_id="structure-kind",
                    info=structured.HINTS["none"])
    example = gr.Dropdown(list(structured.EXAMPLES), value=None, label="JSON schema examples",
                          visible=False, elem_id="structure-example")
    text = gr.Code(value="", language="json", label="JSON schema", lines=6,
                   visible=False, elem_id="structure-text")

    def on_kind(k):  # the kind's hint under the radio; each kind starts from an example
        json_kind = k == "json"
        first = next(iter(structured.EXAMPLES))
        return (gr.update(info=structured.HINTS.get(k) or structured.HINTS["none"]),
                gr.update(visible=json_kind, value=first if json_kind else None),
                gr.update(visible=k != "none", label=structured.BOX_LABELS.get(k, "Structure"),
                          language="json" if json_kind else None,
                          value=structured.start_text(k)))

    private = dict(show_progress="hidden", api_visibility="private")
    kind.change(guard(on_kind), inputs=[kind], outputs=[kind, example, text], **private)

    def on_example(name):  # the drop-down emptied by a kind change leaves the box to that change
        return structured.example_text(name) if name in structured.EXAMPLES else gr.skip()

    example.change(guard(on_example), inputs=[example], outputs=[text], **private)
    return {"structure_kind": kind, "structure_text": text}
