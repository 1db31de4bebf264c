"""The page's events: Generate, Stop, Clear, mode switch, the timer (device, rolling table and the
batching section), tab close, and the API.

Each listener is a thin adapter from Gradio values to the plain functions of ``app.handlers``,
wrapped in :func:`app.errors.guard`: every event of the page can be called by any web client
through the queue API (hidden ones too), and none may answer with a traceback.
"""

from __future__ import annotations

import gradio as gr

from . import api, handlers
from .errors import guard

PRIVATE = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")


def wire(demo: gr.Blocks, page, pg, max_concurrency: int) -> None:
    """Attach every event listener of the page (call inside the ``gr.Blocks`` context).

    Args:
        demo: the Blocks being built; page: its components (``app.ui`` names them);
        pg: the shared :class:`app.service.Playground`; max_concurrency: generations (page and
            API together) that Gradio runs at once.
    """
    gen_outputs = [page.chatbot, page.history, page.completion, page.message, page.status, page.tokens, page.stat_cards,
                   page.latency, page.kv_plot, page.kv_formula, page.memory, page.rolling,
                   page.batch_stats, page.pool, page.tables, page.strip,
                   page.json_btn, page.csv_btn, page.gen_btn, page.stop_btn]

    def to_updates(frame: dict) -> list:
        """A handler frame as one value (or ``gr.skip()``) per component of ``gen_outputs``."""
        out = [frame.get(name, gr.skip()) for name in handlers.OUTPUTS[:-2]]
        trace = frame.get("trace")
        out += [gr.DownloadButton(value=p, interactive=True) for p in trace] if trace else [gr.skip()] * 2
        busy = frame.get("busy")
        out += ([gr.skip()] * 2 if busy is None else
                [gr.Button(interactive=not busy), gr.Button(interactive=busy)])
        return out

    def on_generate(mode, message, history, system_prompt, temperature, top_p, top_k, min_p, rep_penalty,
                    max_tokens, seed, use_kv, request: gr.Request):
        for frame in handlers.generate(pg, request.session_hash, mode, message, history, system_prompt,
                                       temperature, top_p, top_k, min_p, rep_penalty, max_tokens, seed,
                                       use_kv, notify=gr.Warning):
            yield to_updates(frame)

    # the conversation comes from the session's own state, never from the browser: a client
    # could otherwise send a forged Chatbot value (file or component messages naming server files)
    gen_inputs = [page.mode, page.message, page.history, page.system_prompt, page.temperature, page.top_p,
                  page.top_k, page.min_p, page.rep_penalty, page.max_tokens, page.seed, page.use_kv]
    run = dict(fn=guard(on_generate), inputs=gen_inputs, outputs=gen_outputs, show_progress="hidden",
               concurrency_limit=max_concurrency, concurrency_id="engine", api_visibility="private")
    page.gen_btn.click(**run)
    page.message.submit(**run)

    def on_stop(request: gr.Request):  # the request's own stream shows "Stopping…"
        handlers.stop(pg, request.session_hash)

    page.stop_btn.click(guard(on_stop), None, None, **PRIVATE)

    clear_keys = ("status", "tokens", "cards", "latency", "kv", "kv_formula", "memory")

    def on_clear():
        panels = handlers.empty_panels(pg)
        return [[], [], ""] + [panels[k] for k in clear_keys]

    page.clear_btn.click(guard(on_clear), None, [page.chatbot, page.history, page.completion, page.status, page.tokens,
                                          page.stat_cards, page.latency, page.kv_plot, page.kv_formula,
                                          page.memory], **PRIVATE)

    def on_mode(mode):
        chat = mode == "chat"
        return gr.Chatbot(visible=chat), gr.Textbox(visible=chat), gr.Textbox(visible=not chat)

    page.mode.change(guard(on_mode), page.mode, [page.chatbot, page.system_prompt, page.completion], **PRIVATE)

    batch_outputs = [page.batch_stats, page.pool, page.tables, page.strip]

    def on_tick(seen, request: gr.Request):
        frame = handlers.device_frame(pg)
        batch, seen = handlers.idle_batch_frame(pg, request.session_hash, seen)
        return [frame["device"], frame["rolling"], seen] + [batch.get(k, gr.skip()) for k in handlers.BATCH_KEYS]

    tick_outputs = [page.device, page.rolling, page.batch_seen] + batch_outputs
    page.timer.tick(guard(on_tick), page.batch_seen, tick_outputs, **PRIVATE)
    demo.load(guard(on_tick), page.batch_seen, tick_outputs, **PRIVATE)

    # the sidebar's sampling controls belong to the Playground: the Lessons have their own
    page.lessons_tab.select(guard(lambda: gr.Sidebar(open=False)), None, page.sidebar, **PRIVATE)
    page.play_tab.select(guard(lambda: gr.Sidebar(open=True)), None, page.sidebar, **PRIVATE)

    def on_unload(request: gr.Request):
        pg.end_session(request.session_hash)  # tab closed: abort its requests, delete its traces

    demo.unload(guard(on_unload))

    gr.api(guard(api.make_generate(pg)), api_name="generate", concurrency_limit=max_concurrency,
           concurrency_id="engine")
    gr.api(guard(api.make_stats(pg)), api_name="stats", concurrency_limit=None)
    gr.api(guard(api.make_stop(pg)), api_name="stop", concurrency_limit=None)
