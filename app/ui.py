"""The Gradio page: the layout here, the event wiring in ``app.wiring``, the work in ``app.handlers``."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from . import batch_view, cards, figures, handlers
from .assets import load_examples
from .errors import log_internal
from .fmt import fmt_int
from .plot_panel import plot_panel, serve_plotly_js
from .tokens_view import TOOLTIP_JS, inspector_template

INTRO = (
    "Type a prompt and watch an LLM work. **Prefill** reads the whole prompt in one forward pass; "
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


def _sidebar(pg) -> dict:
    """The request's settings, then the sampling controls and the model badge (the sidebar
    itself closes on the Lessons tab).

    Mode, max new tokens, seed and the KV cache switch come first, so a 720 px tall window shows
    them without scrolling the sidebar.
    """
    cap = max(1, min(2048, pg.max_seq_tokens - 1))
    with gr.Sidebar(open=True, width=300, elem_id="sidebar") as sidebar:
        gr.Markdown("### LLM inference playground", elem_classes=["side-title"])
        s = dict(
            sidebar=sidebar,
            mode=gr.Radio([("Chat", "chat"), ("Raw completion", "raw")], value="chat", label="Mode",
                          elem_id="mode", info="raw: the model simply continues your text"),
            max_tokens=gr.Slider(1, cap, value=min(256, cap), step=1, label="max new tokens",
                                 elem_id="max-tokens"),
            seed=gr.Number(value=-1, precision=0, label="seed (-1 = random)", elem_id="seed"),
            use_kv=gr.Checkbox(value=True, label="KV cache", elem_id="use-kv",
                               info="off: every step recomputes the whole sequence (watch the latency grow)"),
        )
        gr.Markdown("### Sampling", elem_classes=["side-title"])
        s.update(
            temperature=gr.Slider(0, 2, value=0.7, step=0.05, label="temperature", elem_id="temperature",
                                  info="0 = greedy: always the most likely token"),
            top_k=gr.Slider(0, 200, value=50, step=1, label="top-k",
                            info="keep only the k most likely tokens; 0 = off"),
            top_p=gr.Slider(0.05, 1.0, value=0.95, step=0.01, label="top-p (nucleus)",
                            info="keep the fewest tokens whose probabilities add up to p; 1 = off"),
            min_p=gr.Slider(0, 0.5, value=0.0, step=0.01, label="min-p",
                            info="drop tokens below min-p × the top token's probability; 0 = off"),
            rep_penalty=gr.Slider(0.8, 2.0, value=1.1, step=0.05, label="repetition penalty",
                                  elem_id="rep-penalty", info="> 1 makes tokens already seen less likely; 1 = off"),
            system_prompt=gr.Textbox(label="System prompt (chat mode)", lines=1, elem_id="system-prompt",
                                     placeholder="optional, e.g. You are a concise assistant."),
        )
        gr.HTML(cards.model_badge_html(pg.info, pg.remote_view))
        return s


def _conversation(empty: dict) -> dict:
    """Chat / completion, the prompt box, the buttons and the status line (the first screen's
    left half)."""
    c = dict(
        chatbot=gr.Chatbot(show_label=False, height=180, feedback_options=None, buttons=["copy"],
                           elem_id="chatbot", placeholder="The conversation appears here."),
        completion=gr.Textbox(label="Completion: your text + the model's continuation", show_label=False, lines=7,
                              max_lines=7, interactive=False, visible=False, elem_id="completion",
                              placeholder="Completion: your text + the model's continuation"),
        message=gr.Textbox(label="Prompt", show_label=False, lines=2, max_lines=4, placeholder=PROMPT_HINT, elem_id="prompt",
                           container=False),
    )
    with gr.Row(elem_id="buttons"):
        c["gen_btn"] = gr.Button("Generate", variant="primary", elem_id="generate-btn", min_width=90)
        c["stop_btn"] = gr.Button("Stop", variant="stop", interactive=False, elem_id="stop-btn", min_width=70)
        c["clear_btn"] = gr.Button("Clear", elem_id="clear-btn", min_width=70)
    c["status"] = gr.HTML(empty["status"], elem_id="status")
    return c


def _examples(c: dict) -> None:
    """Example prompts (below the first screen: a click fills the prompt box and the mode)."""
    examples = load_examples()
    gr.Examples(examples=[[ex["mode"], ex["prompt"]] for ex in examples],
                example_labels=[ex["label"] for ex in examples], inputs=[c["mode"], c["message"]],
                label="Examples (English and 中文)")


def _panels(pg, empty: dict, inputs: dict) -> dict:
    """The live Plotly panels (latency and KV cache on the first screen), the KV formula, the
    introduction and examples (``inputs``: the mode and prompt components they fill), the
    batching section, the memory and device panels, the rolling table and the trace downloads."""
    p = {}
    head = serve_plotly_js()
    with gr.Row(elem_id="live-plots"):
        p["latency"] = plot_panel(empty["latency"], "latency-plot", head, min_height=figures.LIVE_HEIGHT)
        p["kv_plot"] = plot_panel(empty["kv"], "kv-plot", head, min_height=figures.LIVE_HEIGHT)
    p["kv_formula"] = gr.HTML(empty["kv_formula"], elem_id="kv-formula")
    gr.Markdown(INTRO, elem_classes=["intro"])
    _examples(inputs)
    p.update(_batching(pg, head))
    with gr.Row():
        p["memory"] = plot_panel(empty["memory"], "memory-plot", head)
        p["device"] = plot_panel(figures.device_figure([], False, pg.device.reason), "device-plot", head)
    with gr.Row():
        with gr.Column(scale=3):
            gr.Markdown("### Recent requests (every user of this server)")
            p["rolling"] = gr.HTML(cards.rolling_table_html(pg.rolling_summary()), elem_id="rolling")
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
    show = bool(stats.get("batching"))
    gr.Markdown(BATCH_INTRO, elem_id="batching-intro")
    gr.Markdown(PREFIX_SHARED if pg.prefix_cache_shared else PREFIX_PER_SESSION, elem_id="prefix-cache-note")
    b = {"batch_stats": gr.HTML(first["batch_stats"], elem_id="batch-stats")}
    with gr.Row(equal_height=False):
        with gr.Column(scale=5):
            b["pool"] = gr.HTML(first["pool"], visible=show, elem_id="block-pool")
            b["tables"] = gr.HTML(first["tables"], visible=show, elem_id="block-tables")
        with gr.Column(scale=4):
            b["strip"] = plot_panel(first["strip"], "step-strip", head, visible=show)
    return b


def _lessons(pg) -> None:
    """The Lessons tab (``app.lessons``); a note instead when it can't be built (the reason
    goes to the server log: it may name server paths)."""
    if not pg.capabilities.supports_lessons:
        from .remote.view import LESSONS

        gr.Markdown(LESSONS)
        return
    try:
        from .lessons import build_lessons

        build_lessons(pg.engine, pg.engine_kwargs)
    except Exception as exc:  # noqa: BLE001 - the playground must still load
        gr.Markdown(f"The lessons are unavailable on this server ({log_internal('the Lessons tab', exc)}).")


def build_demo(pg, max_concurrency: int = 36) -> gr.Blocks:
    """Build the playground page around a :class:`app.service.Playground`.

    Args:
        pg: the playground (engine wrapper) shared by every session.
        max_concurrency: requests (page and API together) Gradio runs at once; set it above the
            engine's queue size so a full engine queue is reported, not hidden by Gradio's queue.

    Returns:
        The ``gr.Blocks``; launch it with ``theme`` and ``css`` (Gradio 6 takes them in ``launch``).
    """
    from .wiring import wire

    empty = handlers.empty_panels(pg)
    # delete_cache: every hour, remove uploads and copies of served files older than a day
    # (and all of them at shutdown)
    with gr.Blocks(title="LLM inference playground", fill_width=True, delete_cache=(3600, 86400)) as demo:
        sidebar = _sidebar(pg)
        with gr.Tabs(elem_id="main-tabs"):
            with gr.Tab("Playground", id="playground", elem_id="tab-playground") as play_tab:
                if pg.capabilities.remote:
                    from .remote.view import CLIENT_SIDE, NO_TRACE

                    gr.Markdown(f"**Remote engine.** {CLIENT_SIDE}. {NO_TRACE}.", elem_id="remote-note")
                # the first screen: ask on the left, the answer's tokens and numbers on the right,
                # the per-token latency and the KV cache under them
                with gr.Row(equal_height=False, elem_id="first-screen"):
                    with gr.Column(scale=5, min_width=300):
                        conversation = _conversation(empty)
                    with gr.Column(scale=5, min_width=300):
                        stat_cards = gr.HTML(empty["cards"], elem_id="stat-cards")
                        tokens = gr.HTML(empty["tokens"], html_template=inspector_template(),
                                         js_on_load=TOOLTIP_JS, elem_id="tokens")
                panels = _panels(pg, empty, {**conversation, **sidebar})
            with gr.Tab("Lessons", id="lessons", elem_id="tab-lessons") as lessons_tab:
                _lessons(pg)
            with gr.Tab("Beams and samples", id="decoding", elem_id="tab-decoding"):
                from .decoding_tab import build_decoding_tab
                build_decoding_tab(pg)
        page = SimpleNamespace(**sidebar, **conversation, **panels, stat_cards=stat_cards, tokens=tokens,
                               timer=gr.Timer(2.0), batch_seen=gr.State(None), history=gr.State([]),
                               play_tab=play_tab,
                               lessons_tab=lessons_tab)
        wire(demo, page, pg, max_concurrency)
    return demo
