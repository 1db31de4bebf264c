"""The page: the Blocks, the sidebar (the Playground's request settings) and the tabs, each
built by its own ``build(ctx)`` (:mod:`app.tabs`)."""

from __future__ import annotations

import gradio as gr

from app.render import cards
from app.tabs import beams, compare, lessons, playground
from app.tabs.playground import settings
from app.tabs.playground.layout import structure_controls
from app.server.errors import guard
from app.server.file_routes import link_trace_buttons
from app.server.progress import untrack_hidden_progress
from app.tabs.context import TabContext


def _sidebar(pg) -> dict:
    """The request's settings, then the sampling controls, the structured output block and the
    model badge (the sidebar
    itself closes on the Lessons and the Beams tab, which have settings of their own).

    Mode, max new tokens, seed and the KV cache switch come first, so a 720 px tall window shows
    them without scrolling the sidebar.
    """
    cap = max(1, min(2048, pg.max_seq_tokens - 1))
    with gr.Sidebar(open=True, width=300, elem_id="sidebar") as sidebar:
        gr.Markdown("### LLM inference playground", elem_classes=["side-title"])
        s = dict(
            sidebar=sidebar,
            mode=gr.Radio([("Chat", "chat"), ("Raw completion", "raw")], value="chat", label="Mode",
                          elem_id="mode", info="chat: your message goes into the chat template, as a conversation; raw: the model simply continues your text"),
            max_tokens=gr.Slider(1, cap, value=min(256, cap), step=1, label="max new tokens",
                                 elem_id="max-tokens"),
            seed=gr.Number(value=-1, precision=0, label="seed (-1 = random)", elem_id="seed"),
            use_kv=gr.Checkbox(value=True, label="KV cache", elem_id="use-kv",
                               info="off: every step recomputes the whole sequence (watch the latency grow)"),
        )
        gr.Markdown("### Sampling", elem_classes=["side-title"])
        s.update(
            temperature=gr.Slider(0, 2, value=0.7, step=0.05, label="temperature", elem_id="temperature",
                                  info="0 = greedy: the most likely token after the repetition penalty "
                                       "(1.1 by default; 1 = plain greedy)"),
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
        s.update(structure_controls())
        # Generate's one input from the sidebar: its controls as one JSON value, joined in the
        # browser (app.tabs.playground.settings)
        s["settings"] = gr.Textbox(settings.initial(s), visible=False, elem_id="settings")
        gr.HTML(cards.model_badge_html(pg.info, pg.remote_view))
        s["decode_step"] = gr.HTML(cards.decode_step_html(pg.engine.compile_status()),
                                   elem_id="decode-step")
        return s


SIDEBAR_JS = """() => {
  const bar = document.getElementById('sidebar');
  const toggle = bar && bar.querySelector(':scope > .toggle-button');
  if (toggle && bar.classList.contains('open') !== %s) toggle.click();
}"""
"""A tab's ``select`` in the browser: the sidebar (the Playground's request settings) open on the
Playground, closed on the other tabs, which have settings of their own.

A server event with the sidebar among its outputs would cost every later message of every event
on the page: Gradio's front end refreshes the loading status of each component any event has
touched on every message, and for a layout block such as the sidebar it snapshots the state of
every component inside it (about a third of that work on the Playground, measured with the
browser's profiler; docs/performance.md, "A light page")."""

DECODE_STEP_EVERY_S = 5.0
"""How often the sidebar's decode-step line is refreshed while the step compiles."""


def _wire_decode_step(demo, pg, decode_step, private: dict) -> None:
    """Refresh the decode-step line (:func:`app.render.cards.decode_step_html`) at the page's
    load and every :data:`DECODE_STEP_EVERY_S` while the engine compiles; the timer stops once
    compiling has ended (compiled, failed or off), so an idle page sends no more events for it.
    Without the load, a page opened after compiling had ended showed the start's "compiling ...
    2 s so far" until the timer's first tick."""
    timer = gr.Timer(DECODE_STEP_EVERY_S)

    def on_tick():
        status = pg.engine.compile_status()
        return cards.decode_step_html(status), gr.Timer(active=status.status == "compiling")

    # one handler for both: a page opened after compiling has ended stops its timer at once
    gr.on([timer.tick, demo.load], guard(on_tick), None, [decode_step, timer], **private)


def build_demo(pg, max_concurrency: int = 36, with_lessons: bool = True,
               compare_peer=None) -> gr.Blocks:
    """Build the playground page around a :class:`app.state.playground.Playground`.

    Args:
        pg: the playground (engine wrapper) shared by every session.
        max_concurrency: requests (page and API together) Gradio runs at once; set it above the
            engine's queue size so a full engine queue is reported, not hidden by Gradio's queue.
        with_lessons: False builds the Lessons tab as a note without events (``--lessons off``).
        compare_peer: a remote engine beside ``pg``'s for the Compare tab (``--compare-base-url``).

    Returns:
        The ``gr.Blocks``; launch it with ``theme`` and ``css`` (Gradio 6 takes them in ``launch``).
    """
    # delete_cache: every hour, remove uploads and copies of served files older than a day
    # (and all of them at shutdown)
    with gr.Blocks(title="LLM inference playground", fill_width=True, delete_cache=(3600, 86400)) as demo:
        sidebar = _sidebar(pg)
        decode_step = sidebar.pop("decode_step")  # not a request setting
        ctx = TabContext.of(pg, max_concurrency, sidebar, lessons=with_lessons)
        ctx.demo = demo
        ctx.compare_peer = compare_peer
        with gr.Tabs(elem_id="main-tabs"):
            with gr.Tab("Playground", id="playground", elem_id="tab-playground") as play_tab:
                playground.build(ctx)
            with gr.Tab("Compare", id="compare", elem_id="tab-compare") as compare_tab:
                compared = compare.build(ctx)
            with gr.Tab("Lessons", id="lessons", elem_id="tab-lessons") as lessons_tab:
                ctx.shown_by = lessons_tab  # the lessons draw their panels when the tab shows
                with_tab = lessons.shown_with_tab(lessons.build(ctx))
            with gr.Tab("Beams and samples", id="decoding", elem_id="tab-decoding") as beams_tab:
                beams.build(ctx)
        # the sidebar's sampling controls belong to the Playground: the Compare, Lessons and Beams
        # tabs have their own, so the sidebar closes there
        private = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")
        _wire_decode_step(demo, pg, decode_step, private)
        # the Lessons tab's refresh timers tick, and its profile sidebar shows, only while it is
        # selected; the sidebar opens and closes in the browser (SIDEBAR_JS)
        def on_select(lessons_shown: bool):
            return lessons.switched(with_tab, lessons_shown)

        for tab, sidebar_open, lessons_shown in ((play_tab, True, False), (compare_tab, False, False),
                                                 (lessons_tab, False, True), (beams_tab, False, False)):
            tab.select(None, None, None, js=SIDEBAR_JS % ("true" if sidebar_open else "false"),
                       api_visibility="private", queue=False)
            if with_tab:
                tab.select(guard(lambda s=lessons_shown: on_select(s)), None, with_tab, **private)
        untrack_hidden_progress(demo)  # last: every listener is attached (app.server.progress)
    demo.compare_engines = compared["engines"]  # its variant engines: shut down with the page
    link_trace_buttons(demo, getattr(pg, "trace_links", None))  # downloads by opaque link, never a server path
    demo.live_feeds = getattr(pg, "live_feeds", None)  # read over app.server.live_route
    return demo
