"""Experiment ``prompt-length``: prefill time and prefill tokens/s as the prompt grows.

Each prompt runs through the engine with ``max_tokens=1``, so the request is one prefill step;
the prefill time is the engine's (first token time − scheduled). Result fields beyond the
common ones (see :mod:`.common`):

- ``lengths``: requested prompt lengths (tokens); ``prompt_tokens``: the actual ones.
- ``prefill_s``: median prefill time per length, s; ``runs_s``: every run, s.
- ``prefill_tokens_per_s``: prompt tokens / median prefill time.
- ``ms_per_token``: median prefill time / prompt tokens, ms.
- ``cheap_until_tokens``: the longest measured prompt whose prefill took at most twice the
  shortest prompt's, i.e. where prefill stops being (nearly) free.
"""

from __future__ import annotations

from engine.experiments.common import (engine_config, engine_for, median, prompt_of_length, report, result, row,
                     run_engine)

NAME = "prompt-length"
TITLE = "Prefill time vs prompt length"
FULL_LENGTHS = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
QUICK_LENGTHS = [16, 64, 256]


def run(loaded, quick: bool = False, progress=None, engine=None, lengths: list[int] | None = None,
        repeats: int | None = None) -> dict:
    """Time a one-token request for each prompt length.

    Args:
        loaded: the :class:`engine.model.model_info.LoadedModel`.
        quick: lengths 16, 64, 256 once each instead of 16 to 4,096 twice each.
        progress: ``progress(fraction, message)`` callback or ``None``.
        engine: an ``LLMEngine`` to run through (a private one when ``None``).
        lengths, repeats: override the sizes (lengths beyond the context window are dropped).
    """
    lengths = list(lengths or (QUICK_LENGTHS if quick else FULL_LENGTHS))
    lengths = sorted(n for n in lengths if 1 <= n < loaded.info.context_len)
    repeats = repeats or (1 if quick else 2)
    res = result(NAME, TITLE, quick, {"lengths": lengths, "repeats": repeats, "max_tokens": 1})
    weights = [max(1, n) * repeats for n in lengths]  # progress roughly by work done
    done, total = 0, sum(weights)
    actual, med, runs = [], [], []
    with engine_for(loaded, engine) as eng:
        res["engine"] = engine_config(eng)
        report(progress, 0.0, "warm-up")
        run_engine(eng, prompt_of_length(loaded.tokenizer, lengths[0])[0], 1, raw=True)
        for n, w in zip(lengths, weights):
            report(progress, done / total, f"prompt of {n} tokens")
            times = []
            for _ in range(repeats):  # a fresh prompt each time: nothing comes from a cache
                out, _ = run_engine(eng, prompt_of_length(loaded.tokenizer, n)[0], 1, raw=True)
                times.append(out.metrics.prefill_time_s)
            actual.append(len(out.prompt_token_ids))
            med.append(median(times))
            runs.append(times)
            done += w
    report(progress, 1.0, "done")
    base = med[0] if med else 0.0
    cheap = max((t for t, s in zip(actual, med) if s <= 2 * base), default=0)
    res.update(lengths=lengths, prompt_tokens=actual, prefill_s=med, runs_s=runs,
               prefill_tokens_per_s=[t / s if s > 0 else 0.0 for t, s in zip(actual, med)],
               ms_per_token=[s * 1000 / t if t else 0.0 for t, s in zip(actual, med)],
               cheap_until_tokens=cheap)
    for t, s, r in zip(actual, med, res["prefill_tokens_per_s"]):
        res["summary"].append(row(f"prefill {t} tokens", s * 1000, f"ms ({r:,.0f} tok/s)"))
    res["summary"].append(row("prefill at most 2x the shortest up to", cheap, "tokens"))
    chunk = res["engine"].get("max_num_batched_tokens")
    if res["engine"].get("batching") and chunk and max(actual, default=0) > chunk:
        res["notes"].append(f"The engine prefills prompts longer than {chunk} tokens in chunks of "
                            f"{chunk} (one step each); prefill time covers every chunk.")
    return res


def plot(res: dict, path: str) -> str:
    """Prefill time (left) and prefill tokens/s (right) against prompt length, log x axis."""
    from engine.experiments.plotting import ENGINE, OTHER, figure, save

    fig, (ax1, ax2) = figure(res["title"], ncols=2, width=5.0)
    x = res["prompt_tokens"]
    ax1.plot(x, [s * 1000 for s in res["prefill_s"]], "o-", color=OTHER)
    ax1.set_ylabel("prefill time (ms)")
    ax2.plot(x, res["prefill_tokens_per_s"], "o-", color=ENGINE)
    ax2.set_ylabel("prefill tokens/s")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(t) for t in x], rotation=45 if len(x) > 6 else 0)
        ax.minorticks_off()
        ax.set_xlabel("prompt tokens (log scale)")
    ax1.set_yscale("log")
    ax1.set_ylabel("prefill time (ms, log scale)")
    cheap = res["cheap_until_tokens"]
    if cheap:
        ax1.axvline(cheap, color="#888888", ls="--", lw=1)
        ax1.set_title(f"≤ 2x the shortest prompt up to {cheap} tokens", fontsize=10)
    cfg = res.get("engine", {})
    chunk = cfg.get("max_num_batched_tokens") if cfg.get("batching") else None
    chunked = f"; prefill in chunks of {chunk} tokens per step" if chunk else ""
    return save(fig, path, f"one-token requests through the engine, median of "
                           f"{res['params']['repeats']} run(s) per length{chunked}")
