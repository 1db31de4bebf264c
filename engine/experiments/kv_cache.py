"""Experiment ``kv-cache``: per-token latency with the KV cache on and off.

With the cache, a decode step feeds one token and reads the cached keys and values; without
it, every step recomputes the whole sequence, so its latency grows with the length. Result
fields beyond the common ones (see :mod:`.common`):

- ``prompt_tokens``, ``new_tokens``.
- ``on_step_ms``, ``off_step_ms``: duration of each decode step (forward + sampling), ms;
  entry ``i`` is the step that produced output token ``i + 1``.
- ``on_prefill_ms``, ``off_prefill_ms``: the prefill step of each run, ms.
- ``on_total_s``, ``off_total_s``: time of each request from scheduling to finish (e2e minus
  queue time, so other requests in a shared engine do not count), s.
- ``total_time_ratio``: off / on total time (how many times slower without the cache).
- ``on_slope_us_per_token``, ``off_slope_us_per_token``: robust (Theil–Sen) slope of step
  latency against the output position, microseconds per token of length.
- ``identical_tokens``: both runs produced the same greedy tokens.
- ``first_mismatch``: 0-based index of the first output token where they part, ``None`` when
  identical. They can part: the cached decode and the full causal recompute use different
  kernels and summation orders, which round differently in bf16/int4 (and much less in fp32),
  and a near-tie between two candidates then flips the greedy choice.
"""

from __future__ import annotations

from engine.experiments.common import (STORY_PROMPT, engine_config, engine_for, first_mismatch, median, report, result, row,
                     run_engine, salted, step_ms)

NAME = "kv-cache"
TITLE = "KV cache on vs off: latency per decode step"


def slope(ys: list[float], max_points: int = 400) -> float:
    """Theil–Sen slope of ``ys`` against 0, 1, 2, ...: the median of the slopes between every
    pair of points, so a few noisy steps (a shared machine) cannot flip its sign. Returns 0.0
    with fewer than two points; longer series are thinned to about ``max_points`` points."""
    n = len(ys)
    if n < 2:
        return 0.0
    stride = max(1, n // max_points)
    pts = list(enumerate(ys))[::stride]
    return median((b - a) / (j - i) for k, (i, a) in enumerate(pts) for j, b in pts[k + 1:])


def busy(out) -> float:
    """Seconds a request spent scheduled: e2e latency minus queue time."""
    return out.metrics.e2e_s - out.metrics.queue_time_s


def run(loaded, quick: bool = False, progress=None, engine=None, new_tokens: int | None = None,
        prompt: str | None = None) -> dict:
    """Generate the same greedy answer with the cache on, then off.

    Args:
        loaded: the :class:`engine.model.model_info.LoadedModel`.
        quick: 32 new tokens instead of 256.
        progress: ``progress(fraction, message)`` callback or ``None``.
        engine: an ``LLMEngine`` to run through (a private one when ``None``).
        new_tokens, prompt: override the size or the chat prompt.
    """
    new_tokens = new_tokens or (32 if quick else 256)
    base = prompt or STORY_PROMPT
    prompt = salted(base)
    with engine_for(loaded, engine) as eng:
        config = engine_config(eng)
        report(progress, 0.0, "warm-up")
        run_engine(eng, salted(base), 4)
        report(progress, 0.05, f"KV cache on: {new_tokens} tokens")
        on, on_ev = run_engine(eng, prompt, new_tokens, use_kv_cache=True)
        report(progress, 0.3, f"KV cache off: {new_tokens} tokens, recomputing every step")
        off, off_ev = run_engine(eng, prompt, new_tokens, use_kv_cache=False)
    report(progress, 1.0, "done")
    on_ms, off_ms = step_ms(on_ev), step_ms(off_ev)
    res = result(NAME, TITLE, quick, {"new_tokens": new_tokens, "prompt": base}, engine=config,
                 prompt_tokens=len(on.prompt_token_ids), new_tokens=new_tokens,
                 on_step_ms=on_ms, off_step_ms=off_ms,
                 on_prefill_ms=step_ms(on_ev, "prefill")[0],
                 off_prefill_ms=step_ms(off_ev, "prefill")[0],
                 on_total_s=busy(on), off_total_s=busy(off),
                 total_time_ratio=busy(off) / busy(on) if busy(on) > 0 else 0.0,
                 on_slope_us_per_token=slope(on_ms) * 1000, off_slope_us_per_token=slope(off_ms) * 1000,
                 identical_tokens=on.token_ids == off.token_ids,
                 first_mismatch=first_mismatch(on.token_ids, off.token_ids))
    res["summary"] = [
        row("total time, KV cache on", res["on_total_s"], "s"),
        row("total time, KV cache off", res["off_total_s"], "s"),
        row("total time ratio off/on", res["total_time_ratio"], "x"),
        row("step latency growth, on", res["on_slope_us_per_token"], "µs per token"),
        row("step latency growth, off", res["off_slope_us_per_token"], "µs per token"),
    ]
    return res


def plot(res: dict, path: str) -> str:
    """The two per-step latency curves over the output position."""
    from engine.experiments.plotting import ENGINE, OTHER, figure, save

    fig, (ax,) = figure(res["title"])
    on, off = res["on_step_ms"], res["off_step_ms"]
    ax.plot(range(1, len(on) + 1), on, color=ENGINE, lw=1.2, label="KV cache on")
    ax.plot(range(1, len(off) + 1), off, color=OTHER, lw=1.2, label="KV cache off (recompute)")
    ax.set_xlabel("output token")
    ax.set_ylabel("decode step latency (ms)")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title(f"total time: on {res['on_total_s']:.1f} s, off {res['off_total_s']:.1f} s "
                 f"({res['total_time_ratio']:.1f}x)", fontsize=10)
    return save(fig, path, f"{res['prompt_tokens']}-token prompt, {res['new_tokens']} new tokens, greedy")
