"""A request's ``n`` choices in the engine, and their events brought to the event loop.

The engine's ``SamplingParams`` has no ``n``: :func:`submit_choices` submits ``n`` independent
engine requests with the same prompt. With a ``seed``, choice ``i`` samples with seed
``seed + i`` (so the choices differ and the whole response repeats); without one, each draws
from the global generator. Each choice prefills the prompt itself unless the prefix cache
already holds its full blocks (vLLM's parallel sampling forks one prefilled sequence instead).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading

from engine.params import SamplingParams
from engine.serve.errors import APIError, bad_value, from_engine


def choice_params(params: SamplingParams, n: int) -> list[SamplingParams]:
    """One ``SamplingParams`` per choice: seeds ``seed + i`` (mod 2**63) when a seed is set."""
    if params.seed is None:
        return [params] * n
    return [dataclasses.replace(params, seed=(params.seed + i) % 2**63) for i in range(n)]


def submit_choices(engine, prompt, params: SamplingParams, n: int, *, raw: bool,
                   id_prefix: str) -> list:
    """Submit ``n`` engine requests for one API request; returns their handles.

    Args:
        engine: the running ``LLMEngine``.
        prompt: chat messages (``raw=False``) or text (``raw=True``).
        params: the request's sampling settings; n: choices (``>= 1``).
        id_prefix: request ids are ``{id_prefix}-{i}``.

    Raises:
        APIError: 400 for a prompt the engine refuses (too long, empty), 429 when the queue is
            full, 503 when the engine is shut down. Choices already submitted are aborted.
    """
    handles = []
    try:
        for i, p in enumerate(choice_params(params, n)):
            handles.append(engine.submit(prompt, p, raw=raw, request_id=f"{id_prefix}-{i}"))
    except ValueError as exc:
        abort_all(handles)
        err = bad_value(exc, ("max_tokens",))
        if err.param is None:
            err.param = "prompt" if raw else "messages"
        if "max_tokens" in err.message and "exceeds" in err.message:
            err.param = "max_tokens"
        raise err from None
    except Exception as exc:  # noqa: BLE001 - queue full, shut down or unexpected
        abort_all(handles)
        raise from_engine(exc) from None
    return handles


def abort_all(handles) -> None:
    """Abort every unfinished handle (their KV blocks return within one engine step)."""
    for h in handles:
        h.abort()


def pump(handles, loop: asyncio.AbstractEventLoop) -> asyncio.Queue:
    """Bring the handles' step events into ``loop``: one thread per handle iterates it and
    puts ``(index, event)`` on the returned queue, then ``(index, None)`` when it ends."""
    queue: asyncio.Queue = asyncio.Queue()

    def follow(i, handle):
        try:
            for ev in handle:
                loop.call_soon_threadsafe(queue.put_nowait, (i, ev))
        finally:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (i, None))
            except RuntimeError:  # the loop has closed (server shutting down)
                pass

    for i, h in enumerate(handles):
        threading.Thread(target=follow, args=(i, h), name=f"sse-{h.request_id}",
                         daemon=True).start()
    return queue


async def events(handles):
    """Yield ``(index, event)`` for every step event of the handles as they come, then
    ``(index, None)`` once each handle has finished (its ``output`` is set)."""
    queue = pump(handles, asyncio.get_running_loop())
    open_ = len(handles)
    while open_:
        i, ev = await queue.get()
        if ev is None:
            open_ -= 1
        yield i, ev
