"""One streamed request to an OpenAI-compatible server, turned into the engine's
``StepEvent`` objects, timed on this client.

Each token's event has ``start_s`` = when the previous token (or, for the first, the request)
left or arrived and ``end_s`` = when its chunk arrived here (``time.perf_counter()``), so the
page's TTFT, per-token latency and tokens/s are the client's view: network and the server's
queue included. With ``logprobs`` the server tells each token's text, its log probability and
up to five alternatives; without them, each chunk's text is one "token" of probability 1 and
no alternatives. Prompt and output token counts come from the stream's ``usage`` chunk.
"""

from __future__ import annotations

import json
import math
import time
from typing import Iterator

import httpx

from engine.output.events import Candidate, StepEvent


class RemoteError(RuntimeError):
    """The server refused or failed the request; the message is the server's own, one line."""


def sse_data(lines: Iterator[str]) -> Iterator[dict]:
    """The JSON objects of a server-sent event stream's ``data:`` lines, until ``[DONE]``.

    Raises:
        RemoteError: an ``{"error": ...}`` event.
    """
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("error"):
            raise RemoteError(error_message(obj))
        yield obj


def error_message(body) -> str:
    """The message of an OpenAI-shaped error body (or a short form of any other body)."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)[:300]
    if isinstance(err, str):
        return err[:300]
    return str(body)[:300]


def _prob(logprob) -> float:
    try:
        return math.exp(float(logprob))
    except (TypeError, ValueError, OverflowError):
        return 0.0


def token_entries(choice: dict) -> list[tuple[str, float, list[Candidate]]]:
    """``(token text, probability, alternatives)`` for each token a chunk's choice carries,
    from a chat choice's ``logprobs.content`` or a text completion's ``logprobs`` lists."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return []
    out = []
    if isinstance(lp.get("content"), list):  # chat
        for e in lp["content"]:
            alts = [Candidate(-1, str(a.get("token", "")), _prob(a.get("logprob")),
                              float(a.get("logprob", -math.inf)))
                    for a in (e.get("top_logprobs") or [])]
            out.append((str(e.get("token", "")), _prob(e.get("logprob")), alts))
    elif isinstance(lp.get("tokens"), list):  # text completion
        tops = lp.get("top_logprobs") or []
        for k, tok in enumerate(lp["tokens"]):
            lps = lp.get("token_logprobs") or []
            alts_d = tops[k] if k < len(tops) and isinstance(tops[k], dict) else {}
            alts = sorted((Candidate(-1, str(t), _prob(v), float(v)) for t, v in alts_d.items()),
                          key=lambda c: -c.prob)
            out.append((str(tok), _prob(lps[k] if k < len(lps) else None), alts))
    return out


class StreamFolder:
    """Turns the chunks of one streamed choice into ``StepEvent`` objects.

    Args:
        request_id: the events' ``request_id``; sent_s: ``time.perf_counter()`` when the
        request was sent.
    """

    def __init__(self, request_id: str, sent_s: float) -> None:
        self.request_id, self.last_s, self.count = request_id, sent_s, 0
        self.finish_reason: str | None = None
        self.usage: dict | None = None

    def fold(self, chunk: dict, now_s: float | None = None) -> list[StepEvent]:
        """The events of one chunk (none for a role-only, usage or finish chunk)."""
        now = time.perf_counter() if now_s is None else now_s
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        events = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            text = (delta.get("content") if isinstance(delta, dict) else choice.get("text")) or ""
            entries = token_entries(choice)
            if not entries and text:
                entries = [(text, 1.0, [])]
            for k, (tok, prob, alts) in enumerate(entries):
                last = k == len(entries) - 1
                start = self.last_s if k == 0 else now
                events.append(StepEvent(
                    request_id=self.request_id, phase="prefill" if self.count == 0 else "decode",
                    step=self.count, token_id=-1, token_text=tok,
                    text_delta=text if last else "", token_prob=prob, top_candidates=alts[:5],
                    start_s=start, end_s=now, num_tokens=0 if self.count == 0 else 1,
                    kv_tokens=0, kv_bytes=0))
                self.count += 1
            if entries:
                self.last_s = now
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return events


def open_stream(client: httpx.Client, url: str, body: dict, headers: dict):
    """Send a streamed request; returns the open ``httpx.Response`` (close it when done).

    Raises:
        RemoteError: the server answered with an error status (its message, one line) or could
            not be reached.
    """
    try:
        request = client.build_request("POST", url, json=body, headers=headers)
        response = client.send(request, stream=True)
    except httpx.HTTPError as exc:
        raise RemoteError(f"the server could not be reached ({type(exc).__name__})") from None
    if response.status_code != 200:
        try:
            response.read()
            message = error_message(response.json())
        except (ValueError, httpx.HTTPError):
            message = f"HTTP {response.status_code}"
        finally:
            response.close()
        raise RemoteError(f"{message} (HTTP {response.status_code})")
    return response
