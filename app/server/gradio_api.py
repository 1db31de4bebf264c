"""The public ``/generate`` API endpoint (for ``gradio_client`` scripts) and ``/stats``.

Example::

    from gradio_client import Client
    client = Client("http://127.0.0.1:7860/")
    for text in client.submit(prompt="Explain the KV cache.", temperature=0, max_tokens=64,
                              api_name="/generate"):
        print(text)   # the answer so far, growing as tokens stream
"""

from __future__ import annotations

import secrets
from typing import Iterator

import gradio as gr

from engine import QueueFullError

from app.server import fields
from app.tabs.playground.handlers import make_params


def make_generate(pg):
    """Build the ``/generate`` function bound to a :class:`app.state.playground.Playground`."""

    def generate(prompt: str, temperature: float = 0.7, top_p: float = 1.0, top_k: int = 0,
                 repetition_penalty: float = 1.0, max_tokens: int = 256, seed: int = -1,
                 min_p: float = 0.0, system_prompt: str = "", raw: bool = False,
                 use_kv_cache: bool = True, request: gr.Request = None) -> Iterator[str]:
        """Generate text from the playground's model, streaming the answer so far.

        Args:
            prompt: the user message (chat template applied) or, with raw=True, plain text to continue.
            temperature: [0, 100]; 0 is greedy. top_p: (0, 1]; 1 is off. top_k: 0 or -1 is off.
            repetition_penalty: [0.01, 100]; 1 is off. max_tokens: new tokens, >= 1. seed: -1 is random.
            min_p: [0, 1]; 0 is off. system_prompt: optional system message (chat only).
            raw: plain completion without the chat template. use_kv_cache: False recomputes
                the whole sequence at every step. Both take true/false (or "true"/"false").

        Returns:
            Streams the generated text so far (a growing string); the last value is the answer.
            A refused or failed request raises an error naming the cause.
        """
        # a call without a Gradio session (a direct Python call) is a session of its own
        session = request.session_hash if request is not None and request.session_hash \
            else "call-" + secrets.token_hex(16)
        try:
            if prompt is None:
                raise ValueError("prompt is required")
            prompt = fields.text("prompt", prompt)
            if not prompt.strip():
                raise ValueError("prompt is empty")
            system_prompt = fields.text("system_prompt", system_prompt, default="")
            raw = fields.flag("raw", raw)
            if raw and system_prompt.strip():
                raise ValueError("system_prompt needs chat mode: with raw=true the prompt is "
                                 "sent as plain text; drop one of them")
            use_kv_cache = fields.flag("use_kv_cache", use_kv_cache)
            params = make_params(temperature, top_p, top_k, min_p, repetition_penalty, max_tokens, seed)
            if raw:
                message = prompt
            else:
                message = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + \
                          [{"role": "user", "content": prompt}]
            handle = pg.submit(session, message, params, raw=raw, use_kv_cache=use_kv_cache)
        except (ValueError, QueueFullError) as exc:
            raise _refused(str(exc)) from None
        text = ""
        try:
            for batch in pg.follow(handle):
                delta = "".join(ev.text_delta or "" for ev in batch)
                if delta:
                    text += delta
                    yield text
            out = handle.output
            if out is not None and out.finish_reason == "error":
                raise gr.Error(f"engine error: {out.error}")
            if out is not None and out.text != text:
                yield out.text
            elif not text:
                yield ""
        finally:
            pg.release(session, handle)

    return generate


def _refused(message: str) -> gr.Error:
    """The client's error for a refused request (bad value, full queue): the message goes back
    to the client; the server log gets no traceback, since nothing failed on the server."""
    return gr.Error(message, print_exception=False)


def make_stats(pg):
    """Build the ``/stats`` function: engine counts and rolling latency percentiles."""

    def stats() -> dict:
        """Engine queue and outcome counts, plus p50/p90/p99 of TTFT, TPOT and e2e (seconds).
        The engine-wide prefix-cache hit rate is left out unless the server shares its prefix
        cache between users (it would count their hits)."""
        return {"engine": pg.stats(), "rolling": pg.rolling_summary(),
                "model": {"name": pg.info.name, "device": pg.info.device, "dtype": pg.info.dtype,
                          "weights": pg.info.weights or pg.info.dtype,
                          "weights_bytes": pg.info.weights_bytes,
                          "kv_cache_dtype": pg.info.kv_dtype or pg.info.dtype}}

    return stats


def make_stop(pg):
    """Build the ``/stop`` function: abort the calling session's requests."""

    def stop(request: gr.Request = None) -> bool:
        """Abort every running or waiting request of this client session; True if one was."""
        return bool(request is not None and request.session_hash and pg.stop(request.session_hash))

    return stop
