"""Per-request streaming state: step events folded into plain lists of numbers.

One :class:`RunState` lives for one Generate click. It never touches torch or Gradio, so the
page's figures, cards and token view are pure functions of it and are tested without a browser.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from engine.output.metrics import RequestMetrics, RequestTimes

from app.render.structured import mask_of


@dataclass
class TokenView:
    """One generated token as the token inspector shows it.

    Attributes:
        text: the token decoded alone (may be part of a character, or a special token).
        prob: probability of the chosen token after the sampling filters, in [0, 1].
        top: up to 5 ``(text, prob)`` pairs the sampler saw, most likely first.
        phase: ``"prefill"`` (the first token comes out of the prefill step) or ``"decode"``.
        visible: False when the token added no user-visible text (a special token such as EOS).
        delta: the text the answer gained at this step (a whole character once its last
            byte-piece token arrives; ``""`` for the pieces before it).
        draft: a draft token (speculative decoding) the model accepted, not one it produced.
        mask: with structured output, what the grammar's mask did at this token
            (:func:`app.render.structured.mask_of`), else ``None``.
    """

    text: str
    prob: float
    top: list[tuple[str, float]]
    phase: str
    visible: bool = True
    delta: str = ""
    draft: bool = False
    mask: dict | None = None


def memory_to_plain(mem: Any) -> dict | None:
    """A memory breakdown (``MemoryBreakdown`` or its dict) as a plain dict, or ``None``.

    Returns:
        ``{"device", "total_bytes", "total_label", "notes", "parts": [{"name", "bytes",
        "measured", "note"}, ...]}``; missing fields get neutral defaults.
    """
    if mem is None:
        return None
    d = mem if isinstance(mem, dict) else (mem.to_dict() if hasattr(mem, "to_dict") else vars(mem))
    parts = []
    for p in d.get("parts") or []:
        p = p if isinstance(p, dict) else vars(p)
        parts.append({
            "name": str(p.get("name", "?")),
            "bytes": max(0, int(p.get("bytes") or 0)),
            "measured": bool(p.get("measured", True)),
            "note": p.get("note") or "",
        })
    notes = d.get("notes") or []
    if isinstance(notes, str):
        notes = [notes]
    return {
        "device": d.get("device", ""),
        "total_bytes": int(d.get("total_bytes") or sum(p["bytes"] for p in parts)),
        "total_label": d.get("total_label") or "total",
        "notes": list(notes),
        "parts": parts,
    }


@dataclass
class RunState:
    """Everything the page draws about one request, accumulated event by event.

    All times are ``time.perf_counter()`` seconds on the engine host (the app runs in the same
    process as the engine, so its clock is the engine's clock).

    Attributes:
        submitted_s: when the app handed the request to the engine (≈ the engine's arrival).
        use_kv_cache: whether the request decodes with a KV cache.
        request_id: the engine's id once submitted.
        prompt_tokens: prompt length in tokens (known after the prefill step).
        submitted_prompt_tokens: the prompt's length as the engine counted it at submit
            (``RequestHandle.num_prompt_tokens``; ``None`` where unknown): shown while the prompt
            is read, before the prefill step reports ``prompt_tokens``.
        prefill_computed: prompt tokens the prefill computed (all its chunks); fewer than
            ``prompt_tokens`` when a prefix cache supplied the rest.
        prefill_steps: engine steps the prefill took (its chunks; 1 for a short prompt).
        cached_prompt_tokens: prompt tokens the prefix cache supplied (not computed).
        token_index: 1, 2, ... — the output token each step produced.
        step_ms: each step's duration (forward pass + sampling) in milliseconds.
        phases: ``"prefill"`` or ``"decode"`` per step.
        step_tokens: tokens processed in each step's forward pass.
        batch_sizes: sequences that shared each step's forward pass (continuous batching).
        kv_tokens, kv_bytes: KV cache length (tokens) and measured size (bytes) after each step.
        token_times: ``end_s`` of each step (when its token became available).
        tokens: the token inspector's :class:`TokenView` list.
        text: the streamed answer so far (the concatenated text deltas).
        memory: the latest memory breakdown as a plain dict (see :func:`memory_to_plain`).
        events: the raw step events, kept for the trace download.
        finish_reason, error: set when the request ends.
        final_metrics: the engine's ``RequestMetrics`` as a dict once the request has ended.
        queue_position: requests ahead of this one while it waits (``None`` once running).
        drafted: draft tokens each token's step verified (speculative decoding; 0 plain).
        step_out: tokens each token's step produced (1 plain; several for a verified step).
    """

    submitted_s: float = field(default_factory=time.perf_counter)
    use_kv_cache: bool = True
    request_id: str | None = None
    prompt_tokens: int = 0
    submitted_prompt_tokens: int | None = None
    prefill_computed: int = 0
    prefill_steps: int = 1
    cached_prompt_tokens: int = 0
    token_index: list[int] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    kv_tokens: list[int] = field(default_factory=list)
    kv_bytes: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    first_start_s: float | None = None
    tokens: list[TokenView] = field(default_factory=list)
    text: str = ""
    memory: dict | None = None
    events: list = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    final_metrics: dict | None = None
    queue_position: int | None = None
    drafted: list[int] = field(default_factory=list)
    step_out: list[int] = field(default_factory=list)

    # ---- folding events -------------------------------------------------------------------
    def add(self, ev: Any) -> None:
        """Fold one ``StepEvent`` into the lists (call once per event, in order)."""
        self.events.append(ev)
        self.queue_position = None
        if self.first_start_s is None:
            self.first_start_s = ev.start_s
        if ev.phase == "prefill":
            # with a KV cache the prompt's length is what the cache holds after prefill; the
            # forward pass may have computed fewer (prefix-cache hits, chunked prefill)
            self.prompt_tokens = int(ev.kv_tokens) if ev.kv_tokens else int(ev.num_tokens)
            self.prefill_computed = int(ev.num_tokens)
            self.prefill_steps = int(getattr(ev, "num_steps", 1) or 1)
            self.cached_prompt_tokens = int(getattr(ev, "cached_tokens", 0) or 0)
        self.token_index.append(len(self.token_index) + 1)
        self.step_ms.append(max(0.0, (ev.end_s - ev.start_s) * 1000.0))
        self.phases.append(ev.phase)
        self.step_tokens.append(int(ev.num_tokens))
        self.batch_sizes.append(int(getattr(ev, "batch_size", 1) or 1))
        self.kv_tokens.append(int(ev.kv_tokens))
        self.kv_bytes.append(int(ev.kv_bytes))
        self.token_times.append(ev.end_s)
        top = [(c.text, float(c.prob)) for c in (ev.top_candidates or [])][:5]
        visible = bool(ev.text_delta) or not _looks_special(ev.token_text)
        self.tokens.append(TokenView(ev.token_text, float(ev.token_prob), top, ev.phase, visible,
                                     ev.text_delta or "", bool(getattr(ev, "draft_accepted", 0)),
                                     mask_of(ev)))
        self.drafted.append(int(getattr(ev, "num_drafted", 0) or 0))
        self.step_out.append(int(getattr(ev, "tokens_in_step", 1) or 1))
        self.text += ev.text_delta or ""
        if ev.memory is not None:
            self.memory = memory_to_plain(ev.memory)
        if ev.finish_reason:
            self.finish_reason = ev.finish_reason

    def finish(self, output: Any) -> None:
        """Record the engine's ``RequestOutput`` (finish reason, error, final metrics)."""
        self.finish_reason = output.finish_reason
        self.error = output.error
        m = output.metrics
        self.final_metrics = m.to_dict() if hasattr(m, "to_dict") else dict(vars(m))
        if not self.prompt_tokens:
            self.prompt_tokens = len(output.prompt_token_ids or [])
        if output.memory is not None:
            self.memory = memory_to_plain(output.memory)
        if output.text and len(output.text) >= len(self.text):
            self.text = output.text

    @property
    def done(self) -> bool:
        """True once the request has ended (any finish reason)."""
        return self.finish_reason is not None

    # ---- derived numbers --------------------------------------------------------------------
    def live_metrics(self, now: float | None = None) -> dict:
        """The stat cards' numbers: exact engine metrics once finished, live estimates before.

        Live estimates use the same definitions as the engine (docs/metrics.md) on the step events'
        timestamps, with the app's submit time standing in for the engine's arrival time.

        Returns:
            dict with ``queue_time_s, ttft_s, tpot_s, e2e_s, prefill_tokens_per_s,
            decode_tokens_per_s, prompt_tokens, output_tokens, cached_prompt_tokens,
            computed_prompt_tokens, prefill_time_s`` (seconds, tokens/s, tokens; prefill speed
            is computed prompt tokens / prefill time: prefix-cache hits are not counted),
            ``step_sum_s`` (:meth:`step_sum_s`) and ``final`` (bool).
        """
        if self.final_metrics is not None:
            m = dict(self.final_metrics)
            out = {k: m.get(k, 0.0) for k in (
                "queue_time_s", "ttft_s", "tpot_s", "e2e_s", "prefill_tokens_per_s",
                "decode_tokens_per_s", "prompt_tokens", "output_tokens", "cached_prompt_tokens",
                "computed_prompt_tokens", "prefill_time_s")}
            out["final"] = True
            out["step_sum_s"] = self.step_sum_s()
            return out
        now = time.perf_counter() if now is None else now
        n = len(self.token_times)
        started = self.first_start_s is not None
        m = RequestMetrics.from_times(
            RequestTimes(arrival=self.submitted_s, scheduled=self.first_start_s,
                         token_times=list(self.token_times), finished=now),
            self.prompt_tokens, self.cached_prompt_tokens).to_dict()
        out = {k: m[k] for k in ("queue_time_s", "ttft_s", "tpot_s", "e2e_s",
                                 "prefill_tokens_per_s", "decode_tokens_per_s",
                                 "prompt_tokens", "output_tokens", "cached_prompt_tokens",
                                 "computed_prompt_tokens", "prefill_time_s")}
        out["final"] = False
        out["step_sum_s"] = self.step_sum_s()
        # the engine's formulas give 0 where a figure is not defined yet: show a dash instead
        if not started:
            out["queue_time_s"] = None
        else:
            out["queue_time_s"] = max(0.0, out["queue_time_s"])
        if not n:
            out["ttft_s"] = None
            if self.submitted_prompt_tokens:  # the prompt being read: its length is known
                out["prompt_tokens"] = self.submitted_prompt_tokens
        if not (n and m["prefill_time_s"] > 0 and self.prompt_tokens):
            out["prefill_tokens_per_s"] = out["prefill_time_s"] = None
        if not (n > 1 and m["decode_time_s"] > 0):
            out["tpot_s"] = out["decode_tokens_per_s"] = None
        return out

    def ends_within(self, max_tokens: int, seconds: float, window: int = 8) -> bool:
        """Whether the answer should reach ``max_tokens`` within ``seconds`` at its recent decode
        rate: the remaining tokens times the mean gap between its last ``window`` tokens.

        ``True`` once it has ended (its last frame comes next); ``False`` before two tokens or
        when the rate is unknown. An answer that ends sooner (end of sequence, a stop string)
        only ends earlier than this says.

        Args:
            max_tokens: the request's token limit (tokens); seconds: the horizon (seconds).
        """
        n = len(self.token_times)
        if self.done or n >= max_tokens:
            return True
        if n < 2:
            return False
        recent = self.token_times[-min(window, n):]
        gap = (recent[-1] - recent[0]) / (len(recent) - 1)
        return gap > 0 and (max_tokens - n) * gap < seconds

    def step_sum_s(self) -> float:
        """Seconds of this request's own steps: the sum of each step's ``end_s − start_s`` (its
        forward pass and sampling), a step counted once when several of its tokens share it
        (speculative decoding). Measured apart from the token timestamps that TTFT, TPOT and
        end-to-end come from, so it checks the latency formula independently; the rest of the
        latency is queueing and the engine's work between steps."""
        spans = {(ev.start_s, ev.end_s) for ev in self.events}
        return sum(max(0.0, end - start) for start, end in spans)

    def status_line(self) -> str:
        """One line for the status bar: waiting / generating / finished and why."""
        if self.error:
            return f"Error: {self.error}"
        if self.finish_reason:
            # short enough for one line of the status bar at 1280 px, the token count first
            why = {
                "stop": "the model ended its answer (EOS)",
                "length": "hit max new tokens (or the context)",
                "abort": "stopped by you",
                "error": "engine error",
            }.get(self.finish_reason, self.finish_reason)
            n = len(self.token_times)
            return f"Finished: {n} token{'' if n == 1 else 's'} · {why}"
        if self.queue_position:
            ahead = self.queue_position
            return f"Waiting in the engine queue: {ahead} request{'s' if ahead != 1 else ''} ahead of yours"
        if not self.token_times:
            n = self.submitted_prompt_tokens
            return f"Prefill: reading the prompt ({n:,} tokens)…" if n else "Prefill: reading the prompt…"
        line = f"Decoding: {len(self.token_times)} tokens so far"
        others = (self.batch_sizes[-1] - 1) if self.batch_sizes else 0
        if others > 0:
            line += f" · sharing each step with {others} other request{'s' if others != 1 else ''}"
        return line


def _looks_special(token_text: str) -> bool:
    t = token_text.strip()
    return len(t) > 2 and t.startswith("<") and t.endswith(">") and ("|" in t or t in ("<s>", "</s>"))


class Throttle:
    """Says when enough time has passed to redraw (keeps the page fast while tokens stream).

    Args:
        interval_s: least seconds between two redraws.
        clock: a ``() -> float`` seconds clock (``time.perf_counter`` by default; tests pass a fake).
    """

    def __init__(self, interval_s: float, clock=time.perf_counter) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._last: float | None = None

    def due(self, force: bool = False) -> bool:
        """True (and restart the interval) when a redraw is due, or always when ``force``."""
        now = self.clock()
        if force or self._last is None or now - self._last >= self.interval_s:
            self._last = now
            return True
        return False
