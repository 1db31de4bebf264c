"""Helpers every experiment shares: progress reports, prompts of a given length, engine runs.

An experiment is a function ``run(loaded, quick=False, progress=None, engine=None, **sizes)``
returning a plain, JSON-ready dict. The fields every result has:

- ``experiment`` (registry name), ``title``, ``quick`` (bool),
- ``status``: ``"ok"``, ``"skipped"`` (with ``reason``) or ``"error"`` (with ``error``),
- ``params``: the sizes the run used (token counts, repeats, ...),
- ``summary``: a list of ``{"metric", "value", "unit"}`` rows for ``summary.md``,
- ``notes``: sentences a reader needs to interpret the numbers (may be empty).
- ``engine``: :func:`engine_config` of the engine that ran it (experiments that use one).

Timed prompts open with a unique tag (:func:`salted`) so a shared engine's prefix cache cannot
serve their prefill from an earlier run.

All times are ``time.perf_counter()`` seconds; rates are per second; sizes are bytes.
"""

from __future__ import annotations

import itertools
import os
import statistics
from contextlib import contextmanager
from typing import Callable, Iterator

Progress = Callable[[float, str], None]

# A chat prompt that invites a long answer (the engine runs it with ignore_eos anyway).
STORY_PROMPT = ("Write a long story about a lighthouse keeper who finds a message in a bottle, "
                "with many details about the sea, the weather and the people of the island.")

# Plain English filler for prompts of a chosen length (raw text, no chat template).
_FILLER = (
    "The tide came in slowly over the grey stones while the keeper counted the ships. "
    "Each evening he wrote the wind, the clouds and the colour of the water in his log. "
    "A fisherman rowed past the rocks and waved, and the gulls followed his small boat home. "
    "In winter the storms were long, so he mended nets and read old letters by the lamp. "
)


_SALTS = itertools.count(1)


def salted(text: str) -> str:
    """``text`` behind a tag unique to this call, e.g. ``"[run 3-9f2c] ..."``.

    The engine's prefix cache reuses the KV blocks of any earlier prompt that starts the same
    way; a unique opening makes every timed prompt compute its own prefill.
    """
    return f"[run {next(_SALTS)}-{os.urandom(2).hex()}] {text}"


def fresh_salt() -> str:
    """A prefix-cache salt unique to this call (``engine.submit(..., cache_salt=...)``): a request
    with it shares no cached block with any other, not even the chat template's system prompt
    that every salted prompt still opens with."""
    return f"run-{next(_SALTS)}-{os.urandom(4).hex()}"


def report(progress: Progress | None, fraction: float, message: str) -> None:
    """Call ``progress(fraction, message)`` when a callback was given.

    Args:
        progress: the caller's callback, or ``None``.
        fraction: share of the experiment done, clipped to ``[0, 1]``.
        message: one short line saying what runs now.
    """
    if progress is not None:
        progress(min(1.0, max(0.0, float(fraction))), message)


def median(values) -> float:
    """Median of a non-empty sequence of numbers (``0.0`` when empty)."""
    values = [float(v) for v in values]
    return statistics.median(values) if values else 0.0


def result(name: str, title: str, quick: bool, params: dict, **fields) -> dict:
    """A result dict with the common fields (status ``ok``, empty summary and notes)."""
    out = {"experiment": name, "title": title, "quick": bool(quick), "status": "ok",
           "params": dict(params), "summary": [], "notes": []}
    out.update(fields)
    return out


def row(metric: str, value, unit: str = "") -> dict:
    """One ``summary`` row: a metric name, its value (number or text) and its unit."""
    if isinstance(value, float):
        value = float(f"{value:.4g}")
    return {"metric": metric, "value": value, "unit": unit}


def prompt_of_length(tokenizer, n_tokens: int, unique: bool = True) -> tuple[str, int]:
    """Raw text whose raw encoding has about ``n_tokens`` tokens.

    Args:
        tokenizer: the model's tokenizer.
        n_tokens: wanted prompt length in tokens (``>= 1``).
        unique: open with a tag unique to this call (see :func:`salted`), so no two prompts
            share a cached prefix.

    Returns:
        ``(text, actual_tokens)``: re-encoding the decoded text can differ by a token or two, so
        the actual count is measured and returned.
    """
    from engine.model.prompt import encode_prompt

    text = salted(_FILLER) if unique else _FILLER
    while len(encode_prompt(tokenizer, text, raw=True)) < n_tokens + 8:
        text += _FILLER
    ids = encode_prompt(tokenizer, text, raw=True)[:n_tokens]
    cut = tokenizer.decode(ids, skip_special_tokens=True)
    return cut, len(encode_prompt(tokenizer, cut, raw=True))


def private_engine(loaded, **options):
    """A benchmark engine: the shipped settings, but no telemetry, no prefix caching (a
    repeated prompt must pay its prefill every time) and the eager decode step unless
    ``compile`` is given (a short experiment ends before a background compile pays off; the
    ``compile`` experiment measures both); ``options`` are more
    :class:`engine.config.EngineConfig` fields (e.g. ``kv_cache_dtype``)."""
    from engine.engine import LLMEngine

    options.setdefault("compile", "off")
    return LLMEngine(loaded, telemetry=False, enable_prefix_caching=False, **options)


def engine_config(engine) -> dict:
    """The settings of ``engine`` that change the numbers: batching, prefix caching, the
    per-step token budget (longer prompts are prefilled in chunks of it), telemetry and the KV
    cache's storage dtype, and the decode step that runs (``"compiled"`` or ``"eager"``)."""
    paged = bool(getattr(engine, "paged", False))
    cfg = engine.config
    status = getattr(engine, "compile_status", None)
    return {"batching": paged,
            "prefix_caching": paged and cfg.enable_prefix_caching,
            "max_num_seqs": cfg.max_num_seqs if paged else 1,
            "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "telemetry": cfg.telemetry, "kv_cache_dtype": cfg.kv_cache_dtype,
            "decode_step": status().path if status else "eager"}


@contextmanager
def engine_for(loaded, engine=None, served: bool = False) -> Iterator:
    """Yield ``engine`` when given (its queue is shared with others), else a
    :func:`private_engine` that is shut down on exit.

    ``served``: the private engine runs the decode step ``python -m engine serve`` runs
    (``compile="auto"``: compiled where it applies, waited for before the first measurement;
    about 10 s from the on-disk cache, minutes on a first start), for experiments that put the
    engine beside a peer (llama.cpp) or time a decode path the server uses (speculative)."""
    if engine is not None:
        yield engine
        return
    own = private_engine(loaded, compile="auto") if served else private_engine(loaded)
    if served:
        own.wait_compiled(3600)
    try:
        yield own
    finally:
        own.shutdown()


def greedy(max_tokens: int):
    """``SamplingParams`` for benchmarks: greedy, exactly ``max_tokens`` tokens (EOS ignored)."""
    from engine.params import SamplingParams

    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)


def run_engine(engine, prompt, max_tokens: int, raw: bool = False, use_kv_cache: bool = True):
    """Run one greedy request to exactly ``max_tokens`` tokens through the engine's queue, as a
    lesson run (``source="lesson"``: kept out of the users' latency percentiles).

    Returns:
        ``(output, events)``: the ``RequestOutput`` and the list of ``StepEvent`` objects.

    Raises:
        RuntimeError: the request did not finish normally (the message says why).
    """
    handle = engine.submit(prompt, greedy(max_tokens), raw=raw, use_kv_cache=use_kv_cache,
                           source="lesson")
    out = handle.result()
    if not out.finished_ok:
        raise RuntimeError(f"engine request ended with {out.finish_reason}: {out.error}")
    return out, list(handle.events)


def warm_then_run(loaded, engine, prompt: str, max_tokens: int, progress, start: float,
                  message: str):
    """One untimed 4-token warm-up, then the request the experiment measures (both salted).

    Args:
        loaded, engine: as for :func:`engine_for`.
        prompt: the chat prompt; max_tokens: the measured request's length.
        progress, start, message: reported at ``start`` and just after the warm-up.

    Returns:
        ``(engine_config, output)`` of the measured request.
    """
    with engine_for(loaded, engine) as eng:
        config = engine_config(eng)
        report(progress, start, "warm-up")
        run_engine(eng, salted(prompt), 4)
        report(progress, start + 0.05, message)
        out, _ = run_engine(eng, salted(prompt), max_tokens)
    return config, out


def step_ms(events, phase: str = "decode") -> list[float]:
    """Durations of the events of one phase, in milliseconds, in step order."""
    return [e.duration_s * 1000.0 for e in events if e.phase == phase]


def first_mismatch(a: list[int], b: list[int]) -> int | None:
    """Index (0-based) of the first position where token lists ``a`` and ``b`` differ; the shorter
    length when one is a prefix of the other; ``None`` when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
