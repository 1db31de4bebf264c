"""Experiment ``telemetry-cost``: decode tokens/s with telemetry on against off.

Telemetry (a memory breakdown per step, NVML on a GPU) must cost under 3% of decode speed.
The same greedy request runs alternately on an engine with telemetry off and one with it on
(A B A B ...), after a warm-up; the ratio is the median of the pairs' ratios. Result fields
beyond the common ones (see :mod:`.common`): ``tokens``, ``pairs``, ``off_tok_s``,
``on_tok_s`` (lists, tokens/s), ``ratio_median`` (on / off), ``overhead_pct``,
``identical_tokens``.
"""

from __future__ import annotations

import statistics
from typing import Callable

from engine.experiments.common import report, result, row
from engine.params import SamplingParams

NAME = "telemetry-cost"
TITLE = "What telemetry costs: decode speed with it on vs off"

PROMPT = "Write a short story about a robot learning to paint."


def measure_telemetry_cost(loaded, tokens: int = 64, pairs: int = 3,
                           progress: Callable[[str], None] | None = None) -> dict:
    """Run the same greedy request alternately on two engines (telemetry off, on: A B A B ...).

    Both engines share the loaded model and run one request at a time, after one warm-up
    request each. Decode tokens/s comes from each request's :class:`RequestMetrics`.

    Args:
        loaded: a :class:`engine.model.model_info.LoadedModel`.
        tokens: new tokens per request (EOS ignored so every run decodes the same count).
        pairs: how many off/on pairs to run.
        progress: called with a line per run, or ``None``.

    Returns:
        ``{"tokens", "pairs", "off_tok_s": [...], "on_tok_s": [...], "ratio_median": on/off
        median of the per-pair ratios, "overhead_pct": (1 - ratio) × 100, "identical_tokens"}``.
    """
    from engine.engine import LLMEngine

    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    off = LLMEngine(loaded, telemetry=False, compile="off")  # the same eager step in both
    on = LLMEngine(loaded, telemetry=True, compile="off")
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


def run(loaded, quick: bool = False, progress=None, engine=None, tokens: int | None = None,
        pairs: int | None = None) -> dict:
    """Measure the telemetry overhead (``engine`` is ignored: two private engines are used).

    Args:
        quick: 24 tokens × 2 pairs instead of 96 tokens × 5 pairs.
    """
    tokens = tokens or (24 if quick else 96)
    pairs = pairs or (2 if quick else 5)
    done = {"n": 0}

    def say(msg: str) -> None:
        done["n"] += 1
        report(progress, done["n"] / pairs, msg)

    m = measure_telemetry_cost(loaded, tokens=tokens, pairs=pairs, progress=say)
    res = result(NAME, TITLE, quick, {"tokens": tokens, "pairs": pairs}, **m)
    res["summary"] = [
        row("decode, telemetry off (median)", sorted(m["off_tok_s"])[len(m["off_tok_s"]) // 2],
            "tok/s"),
        row("decode, telemetry on (median)", sorted(m["on_tok_s"])[len(m["on_tok_s"]) // 2],
            "tok/s"),
        row("on/off ratio (median of pairs)", m["ratio_median"], "x"),
        row("telemetry overhead", m["overhead_pct"], "%"),
        row("identical tokens", "yes" if m["identical_tokens"] else "NO"),
    ]
    return res


def plot(res: dict, path: str) -> str:
    """Paired bars of decode tokens/s, off and on, one pair per run."""
    from engine.experiments.plotting import ENGINE, OTHER, figure, save

    fig, (ax,) = figure(res["title"], height=3.2)
    n = len(res["off_tok_s"])
    xs = list(range(n))
    ax.bar([x - 0.2 for x in xs], res["off_tok_s"], width=0.4, color=OTHER, label="telemetry off")
    ax.bar([x + 0.2 for x in xs], res["on_tok_s"], width=0.4, color=ENGINE, label="telemetry on")
    ax.set_xticks(xs, [f"pair {i + 1}" for i in xs])
    ax.set_ylabel("decode tokens/s")
    ax.legend(fontsize=9, frameon=False)
    return save(fig, path, f"{res['tokens']} greedy tokens per run; overhead "
                           f"{res['overhead_pct']:.1f}% (median of pairs)")
