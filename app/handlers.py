"""What the page's buttons do, as plain functions that yield *frames* (dicts of named outputs).

A frame maps output names (see :data:`OUTPUTS`) to plain values: strings, lists, Plotly
figures. ``app.ui`` turns frames into Gradio updates; tests drive these functions with a fake
engine and read the frames directly.
"""

from __future__ import annotations

from typing import Callable, Iterator

from engine import QueueFullError, SamplingParams

from . import batch_view, cards, figures
from .session import RunState, Throttle
from .tokens_view import tokens_html

OUTPUTS = ("chat", "completion", "message", "status", "tokens", "cards", "latency", "kv",
           "kv_formula", "memory", "rolling", "batch_stats", "pool", "tables", "strip", "trace", "busy")
BATCH_KEYS = ("batch_stats", "pool", "tables", "strip")
TEXT_EVERY_S = 0.25    # text, token chips and stat cards
FIGURES_EVERY_S = 0.75  # Plotly panels (heavier to send and draw)
BATCH_EVERY_S = 1.0    # the batching section (block pool, block tables, recent steps)


def make_params(temperature: float, top_p: float, top_k: int, min_p: float,
                repetition_penalty: float, max_tokens: int, seed: int | None) -> SamplingParams:
    """Sampling settings from the page's or the API's values.

    ``seed`` ``None`` or negative means random; numbers arriving as floats (JSON) are rounded to
    ints for the integer fields.

    Raises:
        ValueError: a value out of range (the message names the field and its range).
    """
    def as_int(name, v):
        if v is None or isinstance(v, bool):
            raise ValueError(f"{name} must be an integer, got {v!r}")
        if isinstance(v, float):
            if not v.is_integer():
                raise ValueError(f"{name} must be an integer, got {v!r}")
            v = int(v)
        return v

    seed = None if seed is None or (isinstance(seed, (int, float)) and seed < 0) else as_int("seed", seed)
    return SamplingParams(temperature=temperature, top_p=top_p, top_k=as_int("top_k", top_k), min_p=min_p,
                          repetition_penalty=repetition_penalty,
                          max_tokens=as_int("max_tokens", max_tokens), seed=seed)


def content_text(content) -> str:
    """Text of a chat message's content as Gradio gives it (a string, a dict or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return str(content.get("text") or content.get("content") or "")
    if isinstance(content, (list, tuple)):
        return "".join(content_text(c) for c in content)
    return str(content)


def chat_messages(history: list | None, message: str, system_prompt: str = "") -> list[dict]:
    """The engine's chat: optional system message, the previous turns, then the new user message."""
    msgs = [{"role": "system", "content": system_prompt.strip()}] if system_prompt and system_prompt.strip() else []
    for m in history or []:
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("user", "assistant"):
            msgs.append({"role": role, "content": content_text(m.get("content"))})
    msgs.append({"role": "user", "content": message})
    return msgs


def empty_panels(pg, note: str = "Ready. Type a prompt and press Generate.") -> dict:
    """The panels before any request (also what Clear shows)."""
    return {
        "status": cards.status_html(note, "info"),
        "tokens": tokens_html([]),
        "cards": cards.stat_cards_html(None),
        "latency": figures.latency_figure([], [], []),
        "kv": figures.kv_figure([], [], pg.bytes_per_token),
        "kv_formula": cards.kv_formula_html(pg.info, bytes_per_token=pg.bytes_per_token,
                                            pool_bytes=getattr(pg, "pool_bytes", None)),
        "memory": figures.memory_figure(None),
    }


def _text_frame(state: RunState, mode: str, chat_base: list, prompt_text: str) -> dict:
    answer = state.text
    frame = {
        "status": cards.status_html(state.status_line(), "busy"),
        "tokens": tokens_html(state.tokens),
        "cards": cards.stat_cards_html(state.live_metrics()),
    }
    if mode == "chat":
        frame["chat"] = chat_base + [{"role": "assistant", "content": answer or "…"}]
    else:
        frame["completion"] = prompt_text + answer
    return frame


def _kv_formula(pg, state: RunState) -> str:
    """The KV formula line with this request's latest cache length (sent with the text, so it
    always agrees with the token counts on the cards)."""
    last_tokens = state.kv_tokens[-1] if state.kv_tokens else None
    return cards.kv_formula_html(pg.info, last_tokens if state.use_kv_cache else None,
                                 state.kv_bytes[-1] if state.kv_bytes else None, pg.bytes_per_token,
                                 getattr(pg, "pool_bytes", None))


def _figure_frame(pg, state: RunState, max_new: int) -> dict:
    return {
        "latency": figures.latency_figure(state.token_index, state.step_ms, state.phases,
                                          state.prompt_tokens, state.use_kv_cache, state.batch_sizes,
                                          state.prefill_computed),
        "kv": figures.kv_figure(state.kv_tokens, state.kv_bytes, pg.bytes_per_token, state.use_kv_cache,
                                max_tokens_hint=(state.prompt_tokens + max_new) if state.prompt_tokens else None),
        "kv_formula": _kv_formula(pg, state),
        "memory": figures.memory_figure(state.memory, state.kv_bytes[-1] if state.kv_bytes else None),
    }


def generate(pg, session_id: str, mode: str, message: str, history: list | None, system_prompt: str,
             temperature: float, top_p: float, top_k: int, min_p: float, repetition_penalty: float,
             max_tokens: int, seed: int | None, use_kv_cache: bool,
             notify: Callable[[str], None] | None = None) -> Iterator[dict]:
    """Run one request for the page and yield frames while it streams.

    Args:
        pg: the :class:`app.service.Playground`.
        session_id: the browser session (so Stop and closing the tab reach this request).
        mode: ``"chat"`` (history + system prompt through the chat template) or ``"raw"``.
        message: the prompt text; history: the Chatbot's messages; system_prompt: chat only.
        temperature ... seed: sampling settings (see :func:`make_params`); use_kv_cache: decode
            with a KV cache (False: recompute the whole sequence each step).
        notify: called with a message for every refused or failed request (a toast in the page).

    Yields:
        Frames (dicts keyed by :data:`OUTPUTS` names). The last frame has ``busy=False``.
    """
    history = list(history or [])
    message = message or ""

    def refuse(msg: str) -> Iterator[dict]:
        if notify:
            notify(msg)
        yield {"status": cards.status_html(msg, "error"), "busy": False}

    if not message.strip():
        yield from refuse("The prompt is empty: type something first.")
        return
    try:
        params = make_params(temperature, top_p, top_k, min_p, repetition_penalty, max_tokens, seed)
        prompt = chat_messages(history, message, system_prompt) if mode == "chat" else message
        state = RunState(use_kv_cache=bool(use_kv_cache))
        handle = pg.submit(session_id, prompt, params, raw=(mode != "chat"), use_kv_cache=bool(use_kv_cache))
    except QueueFullError as exc:
        yield from refuse(f"The engine is busy: {exc}")
        return
    except ValueError as exc:
        yield from refuse(f"Request refused: {exc}")
        return

    state.request_id = handle.request_id
    chat_base = history + [{"role": "user", "content": message}]
    first = {**empty_panels(pg, "Queued…"), **_text_frame(state, mode, chat_base, message),
             **batch_frame(pg, session_id), "busy": True}
    if mode == "chat":
        first["message"] = ""
    yield first
    text_due, figs_due, batch_due = Throttle(TEXT_EVERY_S), Throttle(FIGURES_EVERY_S), Throttle(BATCH_EVERY_S)
    batch_due.due()  # the first frame drew it
    stopping_shown = False
    try:
        for batch in pg.follow(handle):
            for ev in batch:
                state.add(ev)
            if not state.token_times:
                state.queue_position = handle.queue_position()
            frame = {}
            if text_due.due():
                frame.update(_text_frame(state, mode, chat_base, message))
                frame["kv_formula"] = _kv_formula(pg, state)
            if batch and figs_due.due():
                frame.update(_figure_frame(pg, state, params.max_tokens))
            if batch_due.due():  # also while queued: the student sees what fills the engine
                frame.update(batch_frame(pg, session_id, state.live_metrics()["queue_time_s"]))
            if handle.abort_requested and ("status" in frame or not stopping_shown):
                frame["status"] = cards.status_html(STOPPING, "warn")
                stopping_shown = True
            if frame:
                yield frame
        output = handle.output
        state.finish(output)
        trace = pg.write_trace(output, handle.events)
        final = {**_text_frame(state, mode, chat_base, message), **_figure_frame(pg, state, params.max_tokens),
                 "rolling": cards.rolling_table_html(pg.rolling_summary()),
                 **batch_frame(pg, session_id, state.live_metrics()["queue_time_s"]), "busy": False}
        kind = {"stop": "ok", "length": "ok", "abort": "warn"}.get(state.finish_reason, "error")
        final["status"] = cards.status_html(state.status_line(), kind)
        if trace:
            final["trace"] = trace
        if state.finish_reason == "error" and notify:
            notify(f"The engine failed on this request: {state.error}")
        yield final
    finally:
        pg.release(session_id, handle)


STOPPING = "Stopping: the engine aborts the request before its next step…"


def stop(pg, session_id: str) -> bool:
    """Stop this session's request in the engine (not only the page's display).

    The page's status is left to the request's own stream (:func:`generate` shows
    :data:`STOPPING`, then the final line), so a late reply to the click can never overwrite
    the finished status. Returns True if a request was still running or waiting.
    """
    return pg.stop(session_id)


def batch_frame(pg, session_id: str, queue_time_s: float | None = None) -> dict:
    """The batching section for one session: the block pool, block tables, recent steps and
    numbers, with the session's own requests marked "you" (keys :data:`BATCH_KEYS`)."""
    stats, snapshot, steps = pg.batch_data()
    return batch_view.batch_frame(stats, snapshot, steps, pg.session_request_ids(session_id), queue_time_s)


def idle_batch_frame(pg, session_id: str, seen: tuple | None) -> tuple[dict, tuple | None]:
    """The timer's refresh of the batching section while the session isn't generating.

    Returns:
        ``(frame, signature)``; the frame is empty when the session is generating (its own
        stream redraws the section) or when nothing changed since ``seen``.
    """
    if pg.session_busy(session_id):
        return {}, seen
    stats, snapshot, steps = pg.batch_data()
    mine = pg.session_request_ids(session_id)
    sig = batch_view.signature(stats, steps, mine)
    if sig == seen:
        return {}, seen
    return batch_view.batch_frame(stats, snapshot, steps, mine), sig


def device_frame(pg) -> dict:
    """The Device panel and the rolling table (refreshed by a timer on every open page)."""
    mon = pg.device
    return {
        "device": figures.device_figure(mon.samples(), mon.gpu_available, mon.reason, mon.name),
        "rolling": cards.rolling_table_html(pg.rolling_summary()),
    }
