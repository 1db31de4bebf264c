"""The Playground's events: Generate, Stop, Clear, mode switch, the timer (device, rolling table
and the batching section), tab close, and the API. Which output goes to which component comes
from the frame schema, :mod:`app.tabs.playground.frames`.

Each listener is a thin adapter from Gradio values to the plain functions of ``app.tabs.playground.handlers``,
wrapped in :func:`app.server.errors.guard`: every event of the page can be called by any web client
through the queue API (hidden ones too), and none may answer with a traceback.
"""

from __future__ import annotations

import gradio as gr

from app.server import gradio_api as api
from app.tabs.playground import handlers
from app.tabs.playground.frames import (BUTTON_KEYS, CLEAR_KEYS, FIGURE_KEYS, RESENT,
                                        STREAM_KEYS, TIMER_KEYS, clear_value, components)
from app.server.errors import guard
from app.tabs.playground.plot_panel import as_value
from app.state.shared_views import shared

PRIVATE = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")
LABELS = {"gen": "Generate", "stop": "Stop"}


def stream_updates(frames, last: dict | None = None, labels: dict | None = None, encode: dict | None = None):
    """Handler frames as Gradio values for the answer's stream: one per ``STREAM_KEYS`` name,
    then the JSON and CSV trace downloads, the Generate and the Stop button.

    Each output gets its latest value again while its part of the page hasn't changed, rather
    than ``gr.skip()``: Gradio 6.31 processes a skip as a component update (a new component and
    its config, 0.2-2.3 ms each), a value costs about 0.06 ms, and a streamed value equal to the
    last one reaches the browser as an empty diff. An output without a value yet is skipped. The
    buttons change only in the first frame (Generate off, Stop on, the downloads off until the
    new trace exists) and the last; in between they get their labels (or no file) again.

    Args:
        frames: the frames of :func:`app.tabs.playground.handlers.generate`.
        last: values the outputs hold already (the hidden chatbot's in raw mode, the rolling table).
        labels: the buttons' labels, ``{"gen": ..., "stop": ...}`` (default :data:`LABELS`).
        encode: output name -> function turning a value into what the browser receives (the
            component's own postprocessing, done here once per new value; see :func:`encoder`);
            values pass as they are for names without one.
    """
    encode = encode or {}

    def enc(name, value):
        fn = encode.get(name)
        return fn(value) if fn is not None else value

    raw = dict(last or {})  # each output's latest value, and (in ``last``) as sent
    last = {k: enc(k, v) for k, v in raw.items()}
    labels = {**LABELS, **(labels or {})}
    for frame in frames:
        for k, v in frame.items():
            if k in RESENT and raw.get(k, _NOTHING) is not v:  # a new value: encoded once
                raw[k] = v
                last[k] = enc(k, as_value(v) if k in FIGURE_KEYS else v)
        out = [last[k] if k in last else enc(k, frame[k]) if k in frame else gr.skip() for k in STREAM_KEYS]
        busy, trace = frame.get("busy"), frame.get("trace")
        if busy is None:  # streaming: nothing changes
            out += [None, None, enc("gen", labels["gen"]), enc("stop", labels["stop"])]
        elif busy:  # the request starts
            out += [gr.update(value=None, interactive=False)] * 2
            out += [gr.update(interactive=False), gr.update(interactive=True)]
        else:  # it ended (or was refused: the last trace stays)
            out += ([gr.update(value=enc(k, p), interactive=True) for k, p in zip(BUTTON_KEYS, trace)]
                    if trace else [gr.skip()] * 2)
            out += [gr.update(interactive=True), gr.update(interactive=False)]
        yield out


_NOTHING = object()


def encoder(component):
    """The function sending a value to ``component`` as Gradio would after postprocessing it.

    The page's stream is registered with ``postprocess=False``: Gradio then doesn't hand every
    output of every frame to a worker thread for its ``postprocess`` (19 thread hops a frame, most
    of a frame's cost); the stream encodes each new value once, in its own thread.
    """

    def encode(value):
        out = component.postprocess(value)
        return out.model_dump() if hasattr(out, "model_dump") else out

    return encode


def wire(demo: gr.Blocks, page, pg, max_concurrency: int) -> None:
    """Attach every event listener of the Playground (call inside the ``gr.Blocks`` context).

    Args:
        demo: the Blocks being built; page: its components (named by
            :mod:`app.tabs.playground.layout` and the frame schema); pg: the shared
            :class:`app.state.playground.Playground`; max_concurrency: generations (page and
            API together) that Gradio runs at once.
    """
    _wire_generate(page, pg, max_concurrency)
    page.stop_btn.click(guard(_on_stop(pg)), None, None, **PRIVATE)
    _wire_clear_and_mode(page, pg)
    _wire_timer(demo, page, pg)

    def on_unload(request: gr.Request):
        pg.end_session(request.session_hash)  # tab closed: abort its requests, delete its traces

    demo.unload(guard(on_unload))
    gr.api(guard(api.make_generate(pg)), api_name="generate", concurrency_limit=max_concurrency,
           concurrency_id="engine")
    gr.api(guard(api.make_stats(pg)), api_name="stats", concurrency_limit=None)
    gr.api(guard(api.make_stop(pg)), api_name="stop", concurrency_limit=None)


def _wire_generate(page, pg, max_concurrency: int) -> None:
    """Generate (the button and Enter in the prompt box): the answer's stream."""
    gen_outputs = components(page, STREAM_KEYS + BUTTON_KEYS)
    labels = {"gen": page.gen_btn.value, "stop": page.stop_btn.value}
    encode = {name: encoder(c) for name, c in zip(STREAM_KEYS + BUTTON_KEYS, gen_outputs)}

    def on_generate(mode, message, history, system_prompt, temperature, top_p, top_k, min_p, rep_penalty,
                    max_tokens, seed, use_kv, structure_kind, structure_text, request: gr.Request):
        frames = handlers.generate(pg, request.session_hash, mode, message, history, system_prompt,
                                   temperature, top_p, top_k, min_p, rep_penalty, max_tokens, seed,
                                   use_kv, notify=gr.Warning, structure_kind=structure_kind,
                                   structure_text=structure_text)
        # the hidden chatbot of raw mode keeps the value it has (sending it back costs less than
        # a skip); the rolling table is resent until the request's end redraws it
        held = {"rolling": shared(pg).rolling_html()}
        if mode != "chat":
            held["chat"] = history
        yield from stream_updates(frames, held, labels, encode)

    # the conversation comes from the session's own state, never from the browser: a client
    # could otherwise send a forged Chatbot value (file or component messages naming server files)
    gen_inputs = [page.mode, page.message, page.history, page.system_prompt, page.temperature, page.top_p,
                  page.top_k, page.min_p, page.rep_penalty, page.max_tokens, page.seed, page.use_kv,
                  page.structure_kind, page.structure_text]
    run = dict(fn=guard(on_generate), inputs=gen_inputs, outputs=gen_outputs, show_progress="hidden",
               concurrency_limit=max_concurrency, concurrency_id="engine", api_visibility="private",
               postprocess=False)  # stream_updates encodes the values (see encoder)
    page.gen_btn.click(**run)
    page.message.submit(**run)


def _on_stop(pg):
    def on_stop(request: gr.Request):  # the request's own stream shows "Stopping…"
        handlers.stop(pg, request.session_hash)

    return on_stop


def _wire_clear_and_mode(page, pg) -> None:
    """Clear (every output of the schema with a ``clear`` value), the mode switch and the
    rolling table's reset."""
    def on_clear():
        panels = handlers.empty_panels(pg)
        values = [clear_value(k, panels) for k in CLEAR_KEYS]
        return [as_value(v) if k in FIGURE_KEYS else v for k, v in zip(CLEAR_KEYS, values)]

    page.clear_btn.click(guard(on_clear), None, components(page, CLEAR_KEYS), **PRIVATE)

    def on_mode(mode):
        chat = mode == "chat"
        return gr.Chatbot(visible=chat), gr.Textbox(visible=chat), gr.Textbox(visible=not chat)

    page.mode.change(guard(on_mode), page.mode, [page.chatbot, page.system_prompt, page.completion], **PRIVATE)

    def on_reset_rolling():
        pg.reset_rolling()
        return shared(pg).rolling_html()

    page.rolling_reset.click(guard(on_reset_rolling), None, page.rolling, **PRIVATE)


def _wire_timer(demo, page, pg) -> None:
    """The timer (and the page's load): the device panel, the rolling table and, while the
    session isn't streaming, the batching section (the outputs with ``timer`` in the schema)."""
    def on_tick(seen, request: gr.Request):
        frame = handlers.device_frame(pg)
        batch, seen = handlers.idle_batch_frame(pg, request.session_hash, seen)
        frame.update(batch)
        return [(as_value(frame[k]) if k in FIGURE_KEYS else frame[k]) if k in frame else gr.skip()
                for k in TIMER_KEYS] + [seen]

    tick_outputs = components(page, TIMER_KEYS) + [page.batch_seen]
    page.timer.tick(guard(on_tick), page.batch_seen, tick_outputs, **PRIVATE)
    demo.load(guard(on_tick), page.batch_seen, tick_outputs, **PRIVATE)

