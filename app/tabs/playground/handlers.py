"""What the page's buttons do, as plain functions that yield *frames* (dicts of named outputs).

A frame maps output names (the frame schema, :data:`app.tabs.playground.frames.OUTPUTS`) to
plain values: strings, lists, Plotly figures; each output refreshes at its schema cadence.
:mod:`app.tabs.playground.events` turns frames into Gradio values; tests drive these functions
with a fake engine and read the frames directly.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator

from engine import QueueFullError, SamplingParams

from app.render import cards, figures
from app.server import fields
from app.server.errors import log_internal
from app.state.run_state import RunState, Throttle
from app.render.spec import spec_trace
from app.render.structured import KINDS, structure_from
from app.state.shared_views import shared
from app.render.chat_text import literal_html, shown_messages
from app.render.tokens import TokenChips, tokens_html
from app.tabs.playground.frames import (FIGURES_EVERY_S, FIGURES_LAST_PART, MEMORY_EVERY_S, PLOT_KEYS,
                                        TEXT_EVERY_S, TIMER_EVERY_S)

BATCH_MAX_AGE_S = 0.5  # the batching section, drawn once for all pages, at most this long ago
PLOTS_RESET_S = 0.5    # the last answer's plots stay until the first token, or this long in the queue


def make_params(temperature: float, top_p: float, top_k: int, min_p: float,
                repetition_penalty: float, max_tokens: int, seed: int | None) -> SamplingParams:
    """Sampling settings from the page's or the API's values.

    ``seed`` ``None`` or negative means random; numbers arriving as floats (JSON) are rounded to
    ints for the integer fields.

    Raises:
        ValueError: a value of the wrong type or out of range (the message names the field and
            its range).
    """
    if seed is not None:
        seed = fields.whole("seed", seed)
    return SamplingParams(temperature=fields.number("temperature", temperature),
                          top_p=fields.number("top_p", top_p), top_k=fields.whole("top_k", top_k),
                          min_p=fields.number("min_p", min_p),
                          repetition_penalty=fields.number("repetition_penalty", repetition_penalty),
                          max_tokens=fields.whole("max_tokens", max_tokens),
                          seed=None if seed is None or seed < 0 else seed)


PAGE_LABELS = {"max_tokens": "max new tokens", "temperature": "temperature", "top_p": "top-p",
               "top_k": "top-k", "min_p": "min-p", "repetition_penalty": "repetition penalty",
               "seed": "seed"}
"""The sidebar's label of each sampling field, for refusals a student reads on the page."""


def page_message(exc: Exception) -> str:
    """A refusal with the field named as the sidebar labels it, the API name beside it:
    ``"max_tokens must be an integer"`` → ``"max new tokens (max_tokens) must be an integer"``;
    ``"structured_outputs.regex: ..."`` → ``"structured output: the Regex box: ..."``."""
    msg = str(exc)
    for label, kind in KINDS:  # the engine's "structured_outputs.regex: ..." → the sidebar's box
        field = f"structured_outputs.{kind}"
        if msg.startswith(field + ":"):
            return f"structured output: the {label} box{msg[len(field):]}"
    key = next((k for k in PAGE_LABELS if msg.startswith(k + " ")), None)
    if not key or PAGE_LABELS[key] == key:
        return msg
    return f"{PAGE_LABELS[key]} ({key}){msg[len(key):]}"


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


def plain_history(history: list | None) -> list[dict]:
    """The user and assistant turns of ``history`` as ``{"role", "content": text}`` dicts
    (anything else in them, such as files or components, is dropped)."""
    out = []
    for m in history or []:
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("user", "assistant"):
            out.append({"role": role, "content": content_text(m.get("content"))})
    return out


def chat_messages(history: list | None, message: str, system_prompt: str = "") -> list[dict]:
    """The engine's chat: optional system message, the previous turns, then the new user message."""
    msgs = [{"role": "system", "content": system_prompt.strip()}] if system_prompt and system_prompt.strip() else []
    return msgs + plain_history(history) + [{"role": "user", "content": message}]


def empty_panels(pg, note: str = "Ready. Type a prompt and press Generate.") -> dict:
    """The panels before any request (also what Clear shows)."""
    remote = pg.remote_view  # a remote engine draws its KV and memory panels
    return {
        "status": cards.status_html(note, "info"),
        "tokens": tokens_html([]),
        "cards": cards.stat_cards_html(None),
        "latency": figures.latency_figure([], [], []),
        "kv": remote.kv_figure() if remote else figures.kv_figure([], [], pg.bytes_per_token),
        "kv_formula": cards.kv_formula_html(pg.info, bytes_per_token=pg.bytes_per_token,
                                            pool_bytes=pg.pool_bytes, remote=remote,
                                            pool_blocks=pg.pool_blocks),
        "memory": remote.memory_figure() if remote else figures.memory_figure(None),
    }


def _text_frame(state: RunState, mode: str, chat_base: list, prompt_text: str,
                chips: TokenChips | None = None) -> dict:
    """The text parts of a frame; ``chat_base``: the conversation so far as the chat box shows
    it (:func:`app.render.chat_text.shown_messages`)."""
    answer = state.text
    frame = {
        "status": cards.status_html(state.status_line(), "busy"),
        "tokens": chips.html(state.tokens) if chips is not None else tokens_html(state.tokens),
        "cards": cards.stat_cards_html(state.live_metrics()),
    }
    if mode == "chat":
        frame["chat"] = chat_base + [{"role": "assistant", "content": literal_html(answer) or "…"}]
    else:
        frame["completion"] = prompt_text + answer
    return frame


def _kv_formula(pg, state: RunState) -> str:
    """The KV formula line with this request's latest cache length (sent with the text, so it
    always agrees with the token counts on the cards)."""
    last_tokens = state.kv_tokens[-1] if state.kv_tokens else None
    return cards.kv_formula_html(pg.info, last_tokens if state.use_kv_cache else None,
                                 state.kv_bytes[-1] if state.kv_bytes else None, pg.bytes_per_token,
                                 pg.pool_bytes, state.prompt_tokens,
                                 len(state.token_index), remote=pg.remote_view,
                                 pool_blocks=pg.pool_blocks)


def _figure_frame(pg, state: RunState, max_new: int, memory: bool = True) -> dict:
    """The latency and KV cache plots, the KV formula line and (``memory``) the memory bar of
    ``state``; once the request has ended the memory bar says its KV blocks are free again."""
    frame = {
        "latency": figures.latency_figure(state.token_index, state.step_ms, state.phases,
                                          state.prompt_tokens, state.use_kv_cache, state.batch_sizes,
                                          state.prefill_computed,
                                          spec_trace(state.token_index, state.step_ms,
                                                     state.drafted, state.step_out),
                                          state.prefill_steps),
        "kv": figures.kv_figure(state.kv_tokens, state.kv_bytes, pg.bytes_per_token, state.use_kv_cache,
                                max_tokens_hint=(state.prompt_tokens + max_new)
                                if state.prompt_tokens and not state.done else None),  # ended: its own tokens
        "kv_formula": _kv_formula(pg, state),
    }
    if memory:
        frame["memory"] = figures.memory_figure(state.memory, state.kv_bytes[-1] if state.kv_bytes else None,
                                                request_done=state.done)
    remote = pg.remote_view
    if remote is not None:  # the server's KV usage over time; no memory breakdown
        frame["kv"] = remote.kv_figure()
        if memory:
            frame["memory"] = remote.memory_figure()
    return frame


def generate(pg, session_id: str, mode: str, message: str, history: list | None, system_prompt: str,
             temperature: float, top_p: float, top_k: int, min_p: float, repetition_penalty: float,
             max_tokens: int, seed: int | None, use_kv_cache: bool,
             notify: Callable[[str], None] | None = None, structure_kind: str = "none",
             structure_text: str = "", timer_seen: dict | None = None) -> Iterator[dict]:
    """Run one request for the page and yield frames while it streams.

    Args:
        pg: the :class:`app.state.playground.Playground`.
        session_id: the browser session (so Stop and closing the tab reach this request).
        mode: ``"chat"`` (history + system prompt through the chat template) or ``"raw"``.
        message: the prompt text; history: the conversation so far (the page keeps it on the
            server, never taking it back from the browser); system_prompt: chat only.
        temperature ... seed: sampling settings (see :func:`make_params`); use_kv_cache: decode
            with a KV cache (False: recompute the whole sequence each step).
        notify: called with a message for every refused or failed request (a toast in the page).
        structure_kind, structure_text: the sidebar's structured output
            (:func:`app.render.structured.structure_from`); a bad one is refused by name.
        timer_seen: what the page's timer sent this page last (:func:`timer_frame`'s ``seen``):
            while the answer streams, its frames carry the timer's outputs every
            :data:`~app.tabs.playground.frames.TIMER_EVERY_S` instead (the page pauses its
            timer), those that changed since.

    Yields:
        Frames (dicts keyed by the frame schema's names). The last frame has ``busy=False`` and,
        in chat mode, ``history``: the conversation with this turn's answer.
    """
    history = plain_history(history)

    try:
        message = fields.text("prompt", message, default="")
        if not message.strip():
            yield from refused("The prompt is empty: type something first.", notify)
            return
        if mode not in ("chat", "raw"):
            raise ValueError(f"mode must be chat or raw, got {fields.shown(mode)}")
        system_prompt = fields.text("system_prompt", system_prompt, default="")
        use_kv_cache = fields.flag("use_kv_cache", use_kv_cache)
        params = make_params(temperature, top_p, top_k, min_p, repetition_penalty, max_tokens, seed)
        structure = structure_from(structure_kind, structure_text)
        if structure is not None:
            params = dataclasses.replace(params, structured_outputs=structure)
        prompt = chat_messages(history, message, system_prompt) if mode == "chat" else message
        state = RunState(use_kv_cache=use_kv_cache)
        handle = pg.submit(session_id, prompt, params, raw=(mode != "chat"), use_kv_cache=use_kv_cache)
    except QueueFullError as exc:
        yield from refused(f"The engine is busy: {exc}", notify)
        return
    except ValueError as exc:
        yield from refused(f"Request refused: {page_message(exc)}", notify)
        return
    except Exception as exc:  # noqa: BLE001 - a server failure: logged, the client gets its id
        yield from refused(log_internal("Generate", exc), notify)
        return
    try:
        yield from _stream(pg, session_id, handle, state, mode, history, message, params, notify,
                           timer_seen)
    except Exception as exc:  # noqa: BLE001 - end the stream with a status, buttons restored
        yield from refused(log_internal("Generate", exc), notify)
    finally:
        pg.release(session_id, handle)


def refused(message: str, notify: Callable[[str], None] | None = None) -> Iterator[dict]:
    """The one frame of a refused request: ``message`` in the status line (and to ``notify``,
    a toast in the page), the buttons back to idle."""
    if notify:
        notify(message)
    yield {"status": cards.status_html(message, "error"), "busy": False}


def _stream(pg, session_id: str, handle, state: RunState, mode: str, history: list[dict], message: str,
            params: SamplingParams, notify, timer_seen: dict | None = None) -> Iterator[dict]:
    """:func:`generate`'s frames once the request is in the engine, until its final frame; the
    page counts in the server's frame budget (:mod:`app.state.frame_budget`) while it streams."""
    budget = shared(pg).frames
    token = budget.open()
    try:
        for frame in _frames(pg, session_id, handle, state, mode, history, message, params, notify, budget,
                             timer_seen):
            budget.frame(token)
            yield frame
    finally:
        budget.close(token)


def _frames(pg, session_id: str, handle, state: RunState, mode: str, history: list[dict], message: str,
            params: SamplingParams, notify, budget, timer_seen: dict | None = None) -> Iterator[dict]:
    """The frames of :func:`_stream`; every redraw interval stretched by ``budget.stretch()``
    when more pages stream than get the full cadence. The timer's outputs (:func:`timer_frame`,
    continuing ``timer_seen``) join a text frame every ``TIMER_EVERY_S``, the first one
    ``TIMER_EVERY_S`` after the start."""
    state.request_id = handle.request_id
    state.submitted_prompt_tokens = handle.num_prompt_tokens
    chat_base = history + [{"role": "user", "content": message}]
    shown = shown_messages(chat_base)  # the chat box's copy: HTML in it shown as typed
    chips = TokenChips()  # each token's chip is drawn once, not at every frame
    # the plots keep the last answer until this one's figures are first due, one figure interval
    # after the start: an answer shorter than that draws its plots once, in its last frame (each
    # figure drawn twice instead was about a fifth of a short answer's browser work); a request
    # still queued after PLOTS_RESET_S gets empty plots. Figures due when the answer should reach
    # its token limit within FIGURES_LAST_PART of an interval are left to the last frame too.
    panels = empty_panels(pg, "Queued…")
    first = {**{k: v for k, v in panels.items() if k not in PLOT_KEYS},
             **_text_frame(state, mode, shown, message, chips), "busy": True}
    reset_at = time.perf_counter() + PLOTS_RESET_S
    if mode == "chat":
        first["message"] = ""
    yield first
    text_due, figs_due = Throttle(TEXT_EVERY_S), Throttle(FIGURES_EVERY_S)
    figs_due.due()  # starts the interval: the figures are first due FIGURES_EVERY_S from now
    memory_due = Throttle(MEMORY_EVERY_S)
    timer_due = Throttle(TIMER_EVERY_S)
    timer_due.due()
    drawn = 0  # steps the figures showed when last drawn
    stopping_shown = False
    paced = ((text_due, TEXT_EVERY_S), (figs_due, FIGURES_EVERY_S), (memory_due, MEMORY_EVERY_S),
             (timer_due, TIMER_EVERY_S))
    for batch in pg.follow(handle, TEXT_EVERY_S):  # a poll per text frame: no frame waits a second poll
        stretch = budget.stretch()
        for throttle, every_s in paced:
            throttle.interval_s = every_s * stretch
        for ev in batch:
            state.add(ev)
        if not state.token_times:
            state.queue_position = handle.queue_position()
        frame = {}
        if text_due.due():
            frame.update(_text_frame(state, mode, shown, message, chips))
            frame["kv_formula"] = _kv_formula(pg, state)
            if (len(state.token_index) > drawn and figs_due.due()
                    and not state.ends_within(params.max_tokens, figs_due.interval_s * FIGURES_LAST_PART)):
                frame.update(_figure_frame(pg, state, params.max_tokens, memory_due.due()))
                drawn = len(state.token_index)
            elif (reset_at is not None and not drawn and not state.token_times
                  and time.perf_counter() >= reset_at):
                frame.update({k: panels[k] for k in PLOT_KEYS})
            if drawn or "latency" in frame:
                reset_at = None
            if timer_due.due():  # the page's timer pauses while its answer streams
                tick, timer_seen = timer_frame(pg, session_id, timer_seen)
                frame.update(tick)
        if handle.abort_requested and ("status" in frame or not stopping_shown):
            frame["status"] = cards.status_html(STOPPING, "warn")
            stopping_shown = True
        if frame:
            yield frame
    output = handle.output
    state.finish(output)
    trace = pg.write_trace(output, handle.events, session_id)
    final = {**_text_frame(state, mode, shown, message, chips),
             **_figure_frame(pg, state, params.max_tokens), "busy": False}
    kind = {"stop": "ok", "length": "ok", "abort": "warn"}.get(state.finish_reason, "error")
    final["status"] = cards.status_html(state.status_line(), kind)
    if mode == "chat":
        final["history"] = chat_base + [{"role": "assistant", "content": state.text}]
    if trace:
        final["trace"] = trace
    if state.finish_reason == "error" and notify:
        notify(f"The engine failed on this request: {state.error}")
    yield final


STOPPING = "Stopping: the engine aborts the request before its next step…"


def stop(pg, session_id: str) -> bool:
    """Stop this session's request in the engine (not only the page's display).

    The page's status is left to the request's own stream (:func:`generate` shows
    :data:`STOPPING`, then the final line), so a late reply to the click can never overwrite
    the finished status. Returns True if a request was still running or waiting.
    """
    return pg.stop(session_id)


def session_batch_frame(pg, session_id: str, queue_time_s: float | None = None, max_age_s: float = 0.0) -> dict:
    """The batching section for one session: the block pool, block tables, recent steps and
    numbers, with the session's own requests marked "you" (keys ``frames.BATCH_KEYS``).

    The engine's data is read and the pictures drawn once for all pages
    (:meth:`app.state.shared_views.SharedViews.batch_section`; ``max_age_s``: how old a drawing may be);
    this session only marks its own requests in them.
    """
    section = shared(pg).batch_section(max_age_s)
    return section.frame(pg.session_request_ids(session_id), queue_time_s)


def batch_tick_frame(pg, session_id: str, seen: tuple | None) -> tuple[dict, tuple | None]:
    """The timer's refresh of the batching section, while the session streams and while it
    doesn't (its own stream leaves the section to the timer).

    Returns:
        ``(frame, signature)``; the frame is empty when nothing changed since ``seen``.
    """
    section = shared(pg).batch_section(BATCH_MAX_AGE_S)
    mine = pg.session_request_ids(session_id)
    sig = section.signature(mine)
    if sig == seen:
        return {}, seen
    return section.frame(mine), sig


def timer_frame(pg, session_id: str, seen: dict | None) -> tuple[dict, dict]:
    """The page timer's refresh for one page: the Device panel and the rolling table when they
    changed since this page last got them (a new device sample; a request ended: the table's
    10 kB of HTML were resent every 2 s), and the batching section when it changed
    (:func:`batch_tick_frame`).

    Args:
        seen: what the page got last, as this function returned it (``None`` at first).

    Returns:
        ``(frame, seen)``.
    """
    seen = dict(seen) if isinstance(seen, dict) else {}
    views, frame = shared(pg), {}
    drawn_at, device = views.device_drawing()  # redrawn at most once per sample
    if seen.get("device") != drawn_at:
        frame["device"], seen["device"] = device, drawn_at
    rolling = views.rolling_html()
    if seen.get("rolling") != rolling:
        frame["rolling"] = seen["rolling"] = rolling
    batch, seen["batch"] = batch_tick_frame(pg, session_id, seen.get("batch"))
    frame.update(batch)
    return frame, seen
