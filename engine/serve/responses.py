"""Response bodies and stream chunks of the OpenAI API, built from the engine's step events and
outputs (plain dicts, ready for JSON).

Log probabilities are the engine's own: natural logs of the probabilities the sampler drew
from, after temperature, top-k, top-p and min-p (at temperature 0, the softmax of the
penalised logits). A token filtered out has probability 0; its log is reported as -9999.0,
as vLLM does, since JSON has no infinity.
"""

from __future__ import annotations

import math
import time

from engine.output.events import StepEvent
from engine.serve.requests import ChoiceOutput

FINISH = {"stop": "stop", "length": "length", "abort": "abort", "error": "error"}
NEG_INF_LOGPROB = -9999.0


def logprob(prob: float) -> float:
    """``ln(prob)``, -9999.0 for 0."""
    return math.log(prob) if prob > 0 else NEG_INF_LOGPROB


def usage(outputs: list[ChoiceOutput]) -> dict:
    """``{"prompt_tokens", "completion_tokens", "total_tokens"}`` of a request's choices: the
    prompt counted once (each choice has the same one), the completions summed (an EOS or stop
    token that ended a choice counts: it was generated)."""
    prompt = len(outputs[0].prompt_token_ids) if outputs else 0
    completion = sum(len(o.token_ids) for o in outputs)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def chat_logprob(ev: StepEvent, top: int) -> dict:
    """One entry of a chat choice's ``logprobs.content``: the token, its logprob and UTF-8
    bytes, and the ``top`` most likely tokens of that step."""
    return {"token": ev.token_text, "logprob": logprob(ev.token_prob),
            "bytes": list(ev.token_text.encode("utf-8")),
            "top_logprobs": [{"token": c.text, "logprob": logprob(c.prob),
                              "bytes": list(c.text.encode("utf-8"))}
                             for c in ev.top_candidates[:top]]}


def completion_logprobs(events: list[StepEvent], top: int, offset: int = 0) -> dict:
    """A text completion choice's ``logprobs``: ``tokens``, ``token_logprobs``,
    ``top_logprobs`` (one ``{token: logprob}`` dict per token) and ``text_offset`` (the
    character where each token starts, counted from ``offset``)."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    pos = offset
    for ev in events:
        out["tokens"].append(ev.token_text)
        out["token_logprobs"].append(logprob(ev.token_prob))
        out["top_logprobs"].append({c.text: logprob(c.prob) for c in ev.top_candidates[:top]})
        out["text_offset"].append(pos)
        pos += len(ev.text_delta)
    return out


class Builder:
    """Makes the bodies of one API request: ids, timestamps and model name in one place.

    Args:
        kind: ``"chat"`` or ``"completion"``; model: the served model name;
        request_id: ``chatcmpl-...`` or ``cmpl-...``; top_logprobs: alternatives per token,
        ``None`` without logprobs.
    """

    def __init__(self, kind: str, model: str, request_id: str, top_logprobs: int | None):
        self.kind, self.model, self.id, self.top = kind, model, request_id, top_logprobs
        self.created = int(time.time())
        self.object = "chat.completion" if kind == "chat" else "text_completion"

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    # ---- whole responses ----------------------------------------------------------------------
    def response(self, outputs: list[ChoiceOutput], events: list[list[StepEvent]]) -> dict:
        """The non-streamed body: every choice's text, ``finish_reason``, ``logprobs`` and the
        ``usage``."""
        choices = []
        for i, (out, evs) in enumerate(zip(outputs, events)):
            reason = FINISH.get(str(out.finish_reason), str(out.finish_reason))
            if self.kind == "chat":
                lp = {"content": [chat_logprob(e, self.top) for e in evs]} \
                    if self.top is not None else None
                choices.append({"index": i, "message": {"role": "assistant", "content": out.text},
                                "logprobs": lp, "finish_reason": reason})
            else:
                lp = completion_logprobs(evs, self.top) if self.top is not None else None
                choices.append({"index": i, "text": out.text, "logprobs": lp,
                                "finish_reason": reason})
        return {**self._head(self.object), "choices": choices, "usage": usage(outputs)}

    # ---- stream chunks ------------------------------------------------------------------------
    def chunk(self, index: int, text: str | None = None, ev: StepEvent | None = None,
              finish_reason: str | None = None, role: bool = False, offset: int = 0) -> dict:
        """One stream chunk for choice ``index``: a text delta (with the step's logprobs when
        asked), the assistant role (chat's first chunk), or the ``finish_reason``."""
        lp = None
        if ev is not None and self.top is not None:
            lp = {"content": [chat_logprob(ev, self.top)]} if self.kind == "chat" \
                else completion_logprobs([ev], self.top, offset)
        if self.kind == "chat":
            delta = {"role": "assistant", "content": ""} if role else \
                ({"content": text} if text is not None else {})
            choice = {"index": index, "delta": delta, "logprobs": lp,
                      "finish_reason": finish_reason}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": index, "text": text or "", "logprobs": lp,
                  "finish_reason": finish_reason}
        return {**self._head("text_completion"), "choices": [choice]}

    def usage_chunk(self, outputs: list[ChoiceOutput]) -> dict:
        """The last chunk with ``stream_options.include_usage``: no choices, the usage."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage(outputs)}
