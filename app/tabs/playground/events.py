"""The Playground's events: Generate, Stop, Clear, mode switch, the timer (device, rolling table
and the batching section), tab close, and the API. Which output goes to which component comes
from the frame schema, :mod:`app.tabs.playground.frames`.

Each listener is a thin adapter from Gradio values to the plain functions of ``app.tabs.playground.handlers``,
wrapped in :func:`app.server.errors.guard`: every event of the page can be called by any web client
through the queue API (hidden ones too), and none may answer with a traceback.
"""

from __future__ import annotations

import itertools
import json

import gradio as gr

from app.server import gradio_api as api
from app.tabs.playground import handlers, settings
from app.render.chat_text import shown_messages
from app.render.live_ops import LiveEncoder, LiveLog
from app.render.plainfig import TEMPLATE
from app.tabs.playground.frames import (CLEAR_KEYS, DOWNLOAD_KEYS, END_KEYS, LIVE_APPEND, LIVE_FIGURES,
                                        LIVE_KEYS, STREAM_KEYS, clear_value, components)
from app.server.errors import guard
from app.tabs.run_buttons import end_js, start_js, wire_run
from app.state.shared_views import shared

PRIVATE = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")
TICK = dict(api_visibility="private", show_progress="hidden", queue=False)
"""The page timer's refreshes: one HTTP call each, not a queued event (whose join, estimation,
start and completion messages each had the browser update the event's loading statuses: an idle
page cost 2.6 -> 2.2% of a core); the handler reads drawings shared by all pages."""


START_JS = start_js("generate-btn", "stop-btn")
"""Generate's ``js``: Generate off and Stop on in the browser, at the click (:mod:`app.tabs.run_buttons`)."""
END_JS = end_js("generate-btn", "stop-btn")
"""The browser-only step after Generate's stream: Generate on, Stop off."""


def live_updates(frames, run_id: str, held: dict | None = None, encode: dict | None = None, feed=None,
                 timer: bool = False):
    """Handler frames as the values of Generate's one stream: the live channel's log, one value
    per ``STREAM_KEYS`` name (the chat, the completion, the prompt box), the trace downloads
    (``DOWNLOAD_KEYS``) and the ``END_KEYS`` outputs (the conversation).

    The live panels (``LIVE_KEYS``) reach the page as ops in the channel's log, one line per
    frame with what changed (:mod:`app.render.live_ops`); Gradio's streaming diff sends that line
    alone. The chat and the completion are values of their own (their diffs are the new text).
    An output the run has not changed is a ``gr.skip()``, which the browser leaves alone (a
    value, even an equal one, makes Gradio's front end hand it to its component again: the
    hidden chat box of raw mode measured its layout at every message); once changed, it keeps
    its latest value (an equal value is an empty diff, cheaper on the server than a skip). The
    downloads are emptied and switched off by the first frame's update and switched on with the
    new trace by the last frame's, plain values in between.

    With ``feed`` (an :class:`app.state.live_feeds.LiveFeed`, raw mode), the first frame names
    it (``_feed``) and the completion is a live panel too (its text appended by ops, its Gradio
    value sent by the last frame only). From the moment the page reads the feed, each frame's
    line goes there, and a frame is yielded to Gradio only when one of its outputs changes (the
    prompt box, the downloads, the conversation, the final text), with the log cut back to its
    first line; if the page stops reading, frames are yielded as before.

    Args:
        frames: the frames of :func:`app.tabs.playground.handlers.generate`.
        run_id: names the run's log (unique on the page, see :class:`app.render.live_ops.LiveLog`).
        held: values the ``STREAM_KEYS`` and ``END_KEYS`` outputs hold already (the chat in raw
            mode, the completion and the prompt box as the browser sent them, the conversation).
        encode: output name -> function turning a value into what the browser receives (the
            component's own postprocessing, done here once per new value; see :func:`encoder`).
        feed: the run's live feed, or ``None`` (every frame by Gradio).
        timer: add the page timer's value: :data:`TIMER_OFF` in the first update,
            :data:`TIMER_ON` in the closing one, skipped between.

    Yields:
        ``[log, *stream values, *downloads, *end values]`` (and ``timer``'s value). After the
        last frame, once more with the log cut back to its first line (:attr:`LiveLog.head`).
    """
    encode = encode or {}

    def enc(k, v):  # what the browser receives for output k's value v
        return encode[k](v) if k in encode else v

    log = LiveLog(run_id, templates=(TEMPLATE,))
    by_feed = frozenset(FEED_TEXT) if feed is not None else frozenset()
    panels = LiveEncoder(append=LIVE_APPEND | by_feed, figures=LIVE_FIGURES, counted=by_feed)
    raw = dict(held or {})
    last = {k: enc(k, v) for k, v in raw.items() if k in END_KEYS}  # the others go only once changed
    n = len(DOWNLOAD_KEYS)
    kept = None  # the downloads' plain values once a frame has set them
    sent = set()  # outputs given a new value in this run: plain values from then on
    deferred = {}  # the latest values of the outputs the feed's ops draw
    for i, frame in enumerate(frames):
        ops = panels.ops({k: frame[k] for k in LIVE_KEYS + tuple(by_feed) if k in frame})
        if i == 0 and feed is not None:
            ops["_feed"] = feed.path
        value = log.add(ops)
        end = frame.get("busy") is False
        fresh = False  # a Gradio output changes in this frame
        for k in STREAM_KEYS + END_KEYS:
            if k in by_feed and k in frame and not end:
                deferred[k] = frame[k]  # drawn by the ops; its value waits for the last frame
            elif k in frame and raw.get(k, _NOTHING) is not frame[k]:  # a new value: encoded once
                raw[k], last[k] = frame[k], enc(k, frame[k])
                sent.add(k)
                deferred.pop(k, None)
                fresh = True
        # read over the feed: this frame's line goes there (a frame with no line has nothing for it)
        if feed is not None and i > 0 and (feed.put(log.last_line) if log.last_line else feed.read):
            if not (fresh or end):
                continue  # read over the feed; nothing of Gradio's changes
            value = log.head  # this frame's line went by the feed
        if end and frame.get("trace"):
            kept = [enc(k, p) for k, p in zip(DOWNLOAD_KEYS, frame["trace"])]
            downloads = [gr.update(value=v, interactive=True) for v in kept]
        elif kept is not None:
            downloads = kept
        elif end:  # refused before it ran: the last trace stays downloadable
            downloads = [SKIP] * n
        else:  # the run's first frame: the last trace's downloads emptied until the new one exists
            downloads, kept = [gr.update(value=None, interactive=False)] * n, [None] * n
        yield [value] + [last[k] if k in sent else SKIP for k in STREAM_KEYS] \
            + downloads + [last.get(k) for k in END_KEYS] + ([TIMER_OFF if i == 0 else SKIP] if timer else [])
    for k, v in deferred.items():  # a run that ended without its last frame: its latest text
        if raw.get(k, _NOTHING) is not v:
            raw[k], last[k] = v, enc(k, v)
            sent.add(k)
    # Gradio's closing message carries each output's last value whole: the log cut back to its
    # first line keeps it small (the browser keeps what it drew from a value that starts it).
    # Outputs the run never changed stay skips: their held values here made one more Gradio
    # message after the last frame, which handed the hidden chat box and the prompt box their
    # own values again
    downloads = kept if kept is not None else [SKIP] * n
    yield [log.head] + [last[k] if k in sent else SKIP for k in STREAM_KEYS] + downloads \
        + [last.get(k) for k in END_KEYS] + ([TIMER_ON] if timer else [])


TIMER_OFF, TIMER_ON = gr.update(active=False), gr.update(active=True)
"""The page timer's value in a run's first update (paused: the run's frames carry its outputs,
see :func:`app.tabs.playground.handlers.generate`) and in its last (running again)."""


def frame_log(name: str, frame: dict, templates: bool = True) -> str:
    """A channel's value that draws the live panels of ``frame`` once: a log (named ``name``
    and a new number) of one frame of ops, HTML set and figures whole (``templates``: with the
    Plotly template, which a page's first drawing must carry)."""
    log = LiveLog(f"{name}-{next(_RUNS)}", templates=(TEMPLATE,) if templates else ())
    return log.add(LiveEncoder(figures=LIVE_FIGURES).ops({k: v for k, v in frame.items() if k in LIVE_KEYS}))


def clear_log(pg) -> str:
    """The live channel's value after Clear: a log of one frame drawing every live panel empty."""
    return frame_log("clear", handlers.empty_panels(pg))


_NOTHING = object()
SKIP = gr.skip()
FEED_TEXT = ("completion",)
"""``STREAM_KEYS`` a run read over a feed draws as live panels (its text appended by ops)."""
_RUNS = itertools.count(1)


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
    """Generate (the button and Shift+Enter in the prompt box) as one Gradio event: the browser
    switches the buttons (:data:`START_JS`), the answer streams with the trace downloads and the
    conversation set by its last frame (:func:`live_updates`), and the browser switches the
    buttons back (:data:`END_JS`, no server step)."""
    outputs = STREAM_KEYS + DOWNLOAD_KEYS + END_KEYS
    stream_outputs = [page.live] + components(page, outputs) + [page.timer]
    encode = {name: encoder(c) for name, c in zip(outputs, components(page, outputs))}

    defaults = json.loads(page.settings.value)  # the sidebar's start values (settings.initial)

    def on_generate(message, history, completion, timer_seen, chosen, request: gr.Request):
        try:
            s = settings.parse(chosen, defaults)
        except ValueError as exc:
            mode, frames = None, handlers.refused(f"Request refused: {exc}", notify=gr.Warning)
        else:
            mode = s["mode"]
            frames = handlers.generate(pg, request.session_hash, mode, message, history, s["system_prompt"],
                                       s["temperature"], s["top_p"], s["top_k"], s["min_p"], s["rep_penalty"],
                                       s["max_tokens"], s["seed"], s["use_kv"], notify=gr.Warning,
                                       structure_kind=s["structure_kind"], structure_text=s["structure_text"],
                                       timer_seen=timer_seen)
        # what the outputs hold already (an output the run leaves unchanged is not sent): the
        # hidden chatbot of raw mode, the completion box in chat mode, the prompt box in raw
        # mode, the conversation until the run's last frame
        held = {"completion": completion if isinstance(completion, str) else "",
                "message": message if isinstance(message, str) else "",
                "history": history if isinstance(history, list) else []}
        if mode != "chat":
            held["chat"] = shown_messages(handlers.plain_history(history))
        feeds = getattr(pg, "live_feeds", None)
        feed = feeds.open() if feeds is not None and mode == "raw" else None
        try:
            yield from live_updates(frames, f"{request.session_hash}-{next(_RUNS)}", held, encode, feed,
                                    timer=True)
        except Exception:  # the timer goes on before the error goes to Gradio
            yield [SKIP] * (len(stream_outputs) - 1) + [TIMER_ON]
            raise
        finally:
            if feed is not None:
                feeds.close(feed)

    # the sidebar's settings as one value (app.tabs.playground.settings), joined in the browser
    controls = [getattr(page, name) for name in settings.NAMES]
    gr.on([c.change for c in controls], None, controls, page.settings, js=settings.JOIN_JS,
          api_visibility="private", queue=False, show_progress="hidden")
    # the conversation comes from the session's own state, never from the browser: a client
    # could otherwise send a forged Chatbot value (file or component messages naming server files)
    gen_inputs = [page.message, page.history, page.completion, page.batch_seen, page.settings]
    # one event for the button and Shift+Enter, which starts nothing while a run of it streams
    # (as two events, Shift+Enter during a run started a second one into the same panels)
    run = gr.on([page.gen_btn.click, page.message.submit],
                fn=guard(on_generate), inputs=gen_inputs, outputs=stream_outputs, js=START_JS,
                show_progress="hidden", concurrency_limit=max_concurrency, concurrency_id="engine",
                api_visibility="private", trigger_mode="once",
                postprocess=False)  # live_updates encodes the values (see encoder)
    wire_run(run, "generate-btn", "stop-btn")  # END_JS, after the stream ended or failed


def _on_stop(pg):
    def on_stop(request: gr.Request):  # the request's own stream shows "Stopping…"
        handlers.stop(pg, request.session_hash)

    return on_stop


def _wire_clear_and_mode(page, pg) -> None:
    """Clear (every output of the schema with a ``clear`` value), the mode switch and the
    rolling table's reset."""
    plain = [k for k in CLEAR_KEYS if k not in LIVE_KEYS]

    def on_clear():  # the live panels through the channel (their own values are the first load's)
        panels = handlers.empty_panels(pg)
        return [clear_log(pg)] + [clear_value(k, panels) for k in plain]

    page.clear_btn.click(guard(on_clear), None, [page.live] + components(page, plain), **PRIVATE)

    def on_mode(mode):
        # "hidden" (rendered, not shown) rather than False: Gradio 6.31's front end never ends the
        # loading status of an output this event unmounts, and its status tracker then redraws
        # at every animation frame for as long as the page is open (3 such loops held an idle
        # page at 10% of a core)
        chat, raw = (True, "hidden") if mode == "chat" else ("hidden", True)
        return gr.Chatbot(visible=chat), gr.Textbox(visible=chat), gr.Textbox(visible=raw)

    page.mode.change(guard(on_mode), page.mode, [page.chatbot, page.system_prompt, page.completion], **PRIVATE)

    def on_reset_rolling():
        pg.reset_rolling()
        return tick_log({"rolling": shared(pg).rolling_html()})

    page.rolling_reset.click(guard(on_reset_rolling), None, page.timer_live, **PRIVATE)


def tick_log(frame: dict, templates: bool = False) -> str:
    """The timer channel's value for one refresh: :func:`frame_log` of the ``TIMER_KEYS``
    panels of ``frame``, drawn through the same op handlers a run's frames use."""
    return frame_log("tick", frame, templates)


def _wire_timer(demo, page, pg) -> None:
    """The timer (and the page's load): the device panel, the rolling table and the batching
    section (the outputs with ``timer`` in the schema), those that changed since the page's last
    refresh, drawn through the timer's own channel (``page.timer_live``).

    The panels take ops from the page's runs too (while its answer streams the timer pauses and
    the run's frames carry them), so the timer draws them the same way: a panel's own Gradio
    value, which a run's ops leave behind, would not redraw it when a refresh brought that
    value back (Gradio sees no change), and the tick's Gradio message holds two outputs, not
    seven."""
    def on_tick(seen, request: gr.Request):
        frame, seen = handlers.timer_frame(pg, request.session_hash, seen)
        if not frame:
            return SKIP, seen
        first = not seen.get("templates")
        seen["templates"] = True
        return tick_log(frame, templates=first), seen

    tick_outputs = [page.timer_live, page.batch_seen]
    page.timer.tick(guard(on_tick), page.batch_seen, tick_outputs, **TICK)
    demo.load(guard(on_tick), page.batch_seen, tick_outputs, **TICK)

