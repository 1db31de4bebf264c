"""Server-sent events for streamed completions, and the wait of a non-streamed one; both abort
the request's engine requests as soon as the client goes away, so their KV blocks come back."""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator, Callable

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse

from engine.serve.errors import APIError
from engine.serve.requests import Choices
from engine.serve.responses import FINISH, Builder

DISCONNECT_POLL_S = 0.25
"""How often a non-streamed request checks that its client is still there (seconds)."""


def sse(obj) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line (``[DONE]`` as is)."""
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return f"data: {data}\n\n".encode("utf-8")


async def chunks(builder: Builder, choices: Choices, include_usage: bool) -> AsyncIterator[bytes]:
    """The stream of one API request: for chat, a first chunk with the assistant role per
    choice; a chunk per token (text delta, and its logprobs when asked; a step whose text is
    not complete yet sends nothing unless logprobs are asked); a chunk with each choice's
    ``finish_reason``; with ``include_usage`` a usage chunk; then ``[DONE]``. A choice that
    fails in the engine sends an ``{"error": ...}`` event in OpenAI's shape instead."""
    sent = ["" for _ in range(choices.n)]
    if builder.kind == "chat":
        for i in range(choices.n):
            yield sse(builder.chunk(i, role=True))
    async for i, ev in choices.events():
        if ev is not None:
            if ev.text_delta or builder.top is not None:
                yield sse(builder.chunk(i, ev.text_delta, ev, offset=len(sent[i])))
                sent[i] += ev.text_delta
            continue
        out = choices.output(i)
        reason = out.finish_reason
        if reason == "error":
            yield sse(APIError(500, f"the engine failed on this request: {out.error}", None,
                               "engine_error").body())
            continue
        if out.text.startswith(sent[i]) and len(out.text) > len(sent[i]):  # held-back text
            yield sse(builder.chunk(i, out.text[len(sent[i]):]))
        yield sse(builder.chunk(i, finish_reason=FINISH.get(reason, reason)))
    if include_usage:
        yield sse(builder.usage_chunk(choices.outputs()))
    yield sse("[DONE]")


class EventStream(StreamingResponse):
    """A ``text/event-stream`` response that runs ``on_close`` when it ends for any reason:
    finished, client disconnected (watched for concurrently, whatever ASGI version the server
    speaks) or cancelled.

    Args:
        body: async iterator of encoded events.
        on_close: called once at the end (aborts the engine requests still running).
    """

    def __init__(self, body: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(body, media_type="text/event-stream",
                         headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        self.on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            async with anyio.create_task_group() as group:
                async def stream():
                    await send({"type": "http.response.start", "status": self.status_code,
                                "headers": self.raw_headers})
                    async for data in self.body_iterator:
                        await send({"type": "http.response.body", "body": data,
                                    "more_body": True})
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    group.cancel_scope.cancel()

                async def listen():
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                group.start_soon(listen)
        except* OSError:  # the client went away while we wrote
            pass
        finally:
            self.on_close()
            await self.body_iterator.aclose()


class ClientGone(Exception):
    """The client of a non-streamed request disconnected before its answer."""


async def wait_all(choices: Choices, request: Request) -> None:
    """Wait until every choice has finished; abort them all if the client disconnects first.

    Raises:
        ClientGone: the client went away (the engine requests are aborted).
    """
    async def drain():
        async for _ in choices.events():
            pass

    task = asyncio.ensure_future(drain())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                task.result()
                return
            if await request.is_disconnected():
                choices.abort()
                raise ClientGone()
    finally:
        if not task.done():
            task.cancel()
        choices.abort()  # nothing for finished handles; a cancelled wait aborts the rest
