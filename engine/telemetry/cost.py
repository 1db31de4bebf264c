"""What telemetry costs: decode tokens/s with telemetry on against off, measured in one run."""

from __future__ import annotations

import statistics
from typing import Callable

from engine.params import SamplingParams

PROMPT = "Write a short story about a robot learning to paint."


def measure_telemetry_cost(loaded, tokens: int = 64, pairs: int = 3,
                           progress: Callable[[str], None] | None = None) -> dict:
    """Run the same greedy request alternately on two engines (telemetry off, on: A B A B ...).

    Both engines share the loaded model and run one request at a time, after one warm-up
    request each. Decode tokens/s comes from each request's :class:`RequestMetrics`.

    Args:
        loaded: a :class:`engine.model.loader.LoadedModel`.
        tokens: new tokens per request (EOS ignored so every run decodes the same count).
        pairs: how many off/on pairs to run.
        progress: called with a line per run, or ``None``.

    Returns:
        ``{"tokens", "pairs", "off_tok_s": [...], "on_tok_s": [...], "ratio_median": on/off
        median of the per-pair ratios, "overhead_pct": (1 - ratio) × 100, "identical_tokens"}``.
    """
    from engine.engine import LLMEngine

    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    off, on = LLMEngine(loaded, telemetry=False), LLMEngine(loaded, telemetry=True)
    try:
        off.generate(PROMPT, params), on.generate(PROMPT, params)  # warm-up
        off_rates, on_rates, same = [], [], True
        for i in range(pairs):
            a = off.generate(PROMPT, params)
            b = on.generate(PROMPT, params)
            same &= a.token_ids == b.token_ids
            off_rates.append(a.metrics.decode_tokens_per_s)
            on_rates.append(b.metrics.decode_tokens_per_s)
            if progress:
                progress(f"pair {i + 1}/{pairs}: off {off_rates[-1]:.1f} tok/s, "
                         f"on {on_rates[-1]:.1f} tok/s")
    finally:
        off.shutdown()
        on.shutdown()
    ratio = statistics.median(b / a for a, b in zip(off_rates, on_rates))
    return {"tokens": tokens, "pairs": pairs, "off_tok_s": off_rates, "on_tok_s": on_rates,
            "ratio_median": ratio, "overhead_pct": (1 - ratio) * 100, "identical_tokens": same}
