"""Latency against prompt length: TTFT, TPOT and total time of whole requests as the prompt grows.

Each prompt length runs one request with a fixed answer length (greedy, EOS ignored) through the
engine: a raw prompt that opens with a tag of its own (:func:`.common.prompt_of_length`) and a
prefix-cache salt of its own (:func:`.common.fresh_salt`), so nothing comes from the prefix cache.
The lengths take turns, round after round, and each length's figures come from its run with the
median total time, so ``total = TTFT + TPOT × (N − 1)`` holds for every point (vLLM's definitions,
:class:`engine.output.metrics.RequestMetrics`).

Result of :func:`run`:

- ``lengths`` (asked, tokens), ``new_tokens`` (N, tokens per answer), ``repeats`` (rounds run),
  ``asked_repeats`` (rounds asked for; fewer ran when the time budget would have been passed).
- ``rows``: one per length with ``prompt_tokens`` (actual), ``ttft_s``, ``tpot_s``, ``total_s``
  (last token − arrival: ``TTFT + decode time``), ``e2e_s`` (finished − arrival),
  ``output_tokens``, ``cached_prompt_tokens`` (summed over the rounds) and ``total_runs_s``
  (every round's total, in run order).
- ``engine``: the settings that change the numbers (:func:`.common.engine_config`).

Not a registered ``bench`` experiment: the prefill lesson runs it on the page's engine.
"""

from __future__ import annotations

import time

from engine.experiments.common import engine_config, fresh_salt, greedy, prompt_of_length, report

LENGTHS = (64, 128, 256, 512, 1024)
NEW_TOKENS = 16
BUDGET_S = 60.0  # no round starts that the mean round so far says would end past this


def one_request(engine, tokenizer, length: int, new_tokens: int) -> dict:
    """One request of about ``length`` prompt tokens and exactly ``new_tokens`` answer tokens,
    unique in its prompt and its cache salt; its timings in seconds and token counts.

    Raises:
        RuntimeError: the request did not finish normally (the message says why).
    """
    prompt, _ = prompt_of_length(tokenizer, length)
    out = engine.submit(prompt, greedy(new_tokens), raw=True, source="lesson", cache_salt=fresh_salt()).result()
    if not out.finished_ok:
        raise RuntimeError(f"engine request ended with {out.finish_reason}: {out.error}")
    m = out.metrics
    return {"prompt_tokens": m.prompt_tokens, "output_tokens": m.output_tokens, "ttft_s": m.ttft_s,
            "tpot_s": m.tpot_s, "total_s": m.ttft_s + m.decode_time_s, "e2e_s": m.e2e_s,
            "cached_prompt_tokens": m.cached_prompt_tokens}


def run(engine, tokenizer, lengths=LENGTHS, new_tokens: int = NEW_TOKENS, repeats: int = 1,
        progress=None, budget_s: float = BUDGET_S) -> dict:
    """Time a whole request at each prompt length, ``repeats`` rounds in turns, after a warm-up.

    The first round always runs; a later one starts only when the time so far plus one mean round
    stays within ``budget_s`` seconds (a busy machine gets fewer rounds, not a longer wait).

    Args:
        engine: a running engine (its ``submit``; requests go through its queue).
        tokenizer: the model's tokenizer (to build prompts of a given length).
        lengths: prompt lengths in tokens (each below the model's context window minus N).
        new_tokens: N, the answer length of every request (at least 2, so TPOT is defined).
        repeats: rounds of every length (at most; see ``budget_s``).
        progress: ``progress(fraction, message)`` callback or ``None``.

    Raises:
        ValueError: ``new_tokens`` below 2 or ``repeats`` below 1 (the message names it).
    """
    if int(new_tokens) < 2:
        raise ValueError(f"new_tokens must be at least 2 (TPOT needs two tokens), got {new_tokens}")
    if int(repeats) < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    lengths, n, repeats = sorted(int(x) for x in lengths), int(new_tokens), int(repeats)
    t0 = time.perf_counter()
    report(progress, 0.0, "warm-up")
    one_request(engine, tokenizer, lengths[0], 2)
    runs: dict[int, list[dict]] = {x: [] for x in lengths}
    total_work, done, ran = sum(lengths) * repeats, 0, 0
    for i in range(repeats):
        spent = time.perf_counter() - t0
        if i and spent + spent / i > budget_s:
            break
        ran += 1
        for x in lengths:
            report(progress, done / total_work, f"prompt of {x} tokens (round {i + 1} of {repeats})")
            runs[x].append(one_request(engine, tokenizer, x, n))
            done += x
    rows = []
    for x in lengths:
        mid = sorted(runs[x], key=lambda r: r["total_s"])[(len(runs[x]) - 1) // 2]
        rows.append({**mid, "cached_prompt_tokens": sum(r["cached_prompt_tokens"] for r in runs[x]),
                     "total_runs_s": [r["total_s"] for r in runs[x]]})
    report(progress, 1.0, "done")
    return {"lengths": lengths, "new_tokens": n, "repeats": ran, "asked_repeats": repeats, "rows": rows,
            "engine": engine_config(engine)}
