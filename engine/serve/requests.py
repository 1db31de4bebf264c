"""A request's ``n`` choices in the engine, and their events brought to the event loop.

With ``n > 1`` and sampling (``temperature > 0``) one engine request runs the ``n`` samples
(``SamplingParams.n``): the prompt is prefilled once and the samples share its KV blocks until
they write their own. With a ``seed``, choice ``i`` samples with seed ``seed + i`` (mod 2**63;
:func:`engine.params.sample_seed`), so the choices differ and the whole response repeats; each
choice equals a one-choice request with that seed. At temperature 0 every choice is the same
greedy answer, which the engine's ``n`` refuses, so ``n`` one-sequence requests run instead (the
prefix cache shares their prompt's full blocks).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading

from engine.params import SamplingParams
from engine.serve.errors import APIError, bad_value, from_engine


def choice_params(params: SamplingParams, n: int) -> list[SamplingParams]:
    """One ``SamplingParams`` per choice for ``n`` separate requests: seeds ``seed + i``
    (mod 2**63) when a seed is set."""
    if params.seed is None:
        return [params] * n
    return [dataclasses.replace(params, seed=(params.seed + i) % 2**63) for i in range(n)]


@dataclasses.dataclass
class ChoiceOutput:
    """One finished choice: what the response and ``usage`` need.

    Attributes:
        text: the answer; token_ids: its generated ids (an EOS that ended it included);
        finish_reason: ``stop``, ``length``, ``abort`` or ``error``; error: the engine's message
        for ``error``; prompt_token_ids: the prompt after the chat template, ``[prompt_len]``.
    """

    text: str
    token_ids: list[int]
    finish_reason: str
    error: str | None
    prompt_token_ids: list[int]


class Choices:
    """The engine requests behind one API request: one handle running ``n`` samples, or ``n``
    handles of one sequence each.

    Args:
        handles: the engine's request handles; n: choices.
    """

    def __init__(self, handles: list, n: int):
        self.handles, self.n = handles, n
        self.native = len(handles) == 1 and n > 1
        self._early: dict[int, ChoiceOutput] = {}  # samples that ended before their request

    def abort(self) -> None:
        """Abort every unfinished engine request (their KV blocks return within one step)."""
        abort_all(self.handles)

    async def events(self):
        """Yield ``(choice, event)`` for every step event as it comes, then ``(choice, None)``
        once that choice has finished (:meth:`output` is then set): a sample of one engine
        request ends with the event that carries its ``finish_reason``, not with the slowest
        sample; one that never got such an event (abort, error) ends with the request."""
        streamed: dict[int, list] = {}
        async for i, ev in events(self.handles):
            if not self.native:
                yield i, ev
            elif ev is not None:
                streamed.setdefault(ev.index, []).append(ev)
                yield ev.index, ev
                if ev.finish_reason is not None and ev.index not in self._early:
                    evs = streamed[ev.index]
                    self._early[ev.index] = ChoiceOutput(
                        "".join(e.text_delta for e in evs), [e.token_id for e in evs],
                        str(ev.finish_reason), None, [])
                    yield ev.index, None
            else:
                for k in range(self.n):
                    if k not in self._early:
                        yield k, None

    def output(self, k: int) -> ChoiceOutput:
        """Choice ``k`` once it has finished (a sample that ended before its request: its
        streamed text, ids and reason, without the prompt's ids)."""
        if not self.native:
            o = self.handles[k].output
            return ChoiceOutput(o.text, list(o.token_ids), str(o.finish_reason), o.error,
                                list(o.prompt_token_ids))
        o = self.handles[0].output
        if o is None:
            return self._early[k]
        c = next((c for c in o.outputs if c.index == k), None)
        if c is None or str(o.finish_reason) == "error":
            return ChoiceOutput("", [], str(o.finish_reason), o.error, list(o.prompt_token_ids))
        return ChoiceOutput(c.text, list(c.token_ids), str(c.finish_reason), o.error,
                            list(o.prompt_token_ids))

    def outputs(self) -> list[ChoiceOutput]:
        """Every choice, in order (all finished)."""
        return [self.output(k) for k in range(self.n)]

    def step_events(self) -> list[list]:
        """Each choice's step events, in order (all finished)."""
        if not self.native:
            return [list(h.events) for h in self.handles]
        evs = list(self.handles[0].events)
        return [[e for e in evs if e.index == k] for k in range(self.n)]


def submit_choices(engine, prompt, params: SamplingParams, n: int, *, raw: bool,
                   id_prefix: str) -> Choices:
    """Submit the engine request(s) for one API request with ``n`` choices.

    Args:
        engine: the running ``LLMEngine``.
        prompt: chat messages (``raw=False``) or text (``raw=True``).
        params: the request's sampling settings (``n`` 1); n: choices (``>= 1``).
        id_prefix: the engine request id (``{id_prefix}-{i}`` for separate requests).

    Raises:
        APIError: 400 for a prompt the engine refuses (too long, empty), 429 when the queue is
            full, 503 when the engine is shut down. Requests already submitted are aborted.
    """
    handles = []
    try:
        if n > 1 and params.temperature > 0:
            handles.append(engine.submit(prompt, dataclasses.replace(params, n=n), raw=raw,
                                         request_id=id_prefix))
        else:
            for i, p in enumerate(choice_params(params, n)):
                handles.append(engine.submit(prompt, p, raw=raw, request_id=f"{id_prefix}-{i}"))
    except ValueError as exc:
        abort_all(handles)
        renamed = n > 1 and str(exc).startswith("best_of")  # the engine's name for the API's n
        if renamed:
            exc = ValueError("n" + str(exc)[len("best_of"):])
        raise _prompt_error(exc, raw, renamed) from None
    except Exception as exc:  # noqa: BLE001 - queue full, shut down or unexpected
        abort_all(handles)
        raise from_engine(exc) from None
    return Choices(handles, n)


def _prompt_error(exc: ValueError, raw: bool, renamed: bool) -> APIError:
    """The 400 for the engine's refusal of a submission, naming the API's field: ``n`` (the
    engine's ``best_of``), ``max_tokens`` when prompt plus ``max_tokens`` is too long, else the
    prompt: ``prompt`` for a completion, ``messages`` for a chat (whose message then speaks of
    the messages, not of a field the route does not have)."""
    err = bad_value(exc, ("max_tokens", "n"))
    if renamed:
        err.param = "n"
    elif "max_tokens" in err.message and "exceeds" in err.message:
        err.param = "max_tokens"
    elif err.param in (None, "prompt"):
        err.param = "prompt" if raw else "messages"
    if not raw:
        err.message = _CHAT_PROMPT.sub(lambda m: _CHAT_WORDS[m.group(1)], err.message, count=1)
    return err


_CHAT_PROMPT = re.compile(r"^prompt (is (?=\d)|is at least|\()")
_CHAT_WORDS = {"is ": "messages after the chat template are ", "is at least": "messages are at least",
               "(": "messages after the chat template ("}


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
