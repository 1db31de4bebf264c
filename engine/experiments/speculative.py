"""Experiment ``speculative``: batch-1 decode with and without prompt-lookup speculation.

Two greedy prompts, each run plain and with ``--speculative ngram`` in alternating turns
(A B A B after one warm-up of each, medians): a copy-heavy one (fix a typo in a function and
print it again), where drafts from the prompt are often right, and an open question, where they
seldom are and drafting pauses itself. Each request generates its answer: it stops at the end of
sequence token, or at ``new_tokens``. The prompts' text is the same in every run (a cache salt,
not a tag in the text, keeps each prefill its own), so every run measures the same answers.
(Until 2026-12-03 the requests ran ``new_tokens`` past the end, behind a random tag in the
prompt: the tag changed the answer from run to run, and after the copied function ended the
model made up a new chat turn, which is not copying; those tokens pulled the copy-heavy row
down to 1.25-1.40×.)
Result fields beyond the common ones (see :mod:`.common`):

- ``new_tokens``, ``pairs``, ``num_speculative_tokens``.
- ``rows``: one per prompt: ``name``, ``prompt_tokens``, ``output_tokens`` (of the last
  speculative turn), ``plain_tok_s`` and ``spec_tok_s``
  (decode tokens/s of each turn), ``ratios`` (spec / plain of each pair), ``ratio_median``,
  ``identical_tokens`` (every speculative turn gave the plain greedy tokens), ``acceptance_rate``,
  ``mean_accepted_length``, ``tokens_per_step`` (of the last speculative turn).
- ``verify_ms``: median duration (ms) of the speculative turns' decode steps by drafts verified,
  ``{"0": plain one-token steps, "1": ..., "k": ...}``; ``verify_cost``: the same / the
  one-token median: what verifying k drafts costs against decoding one token.
"""

from __future__ import annotations

from collections import defaultdict

from engine.experiments.common import (engine_config, engine_for, fresh_salt, median, report, result,
                                       row)

NAME = "speculative"
TITLE = "Speculative decoding: prompt lookup vs plain decode at batch 1"
SERVED = True
"""Measured on the decode step ``serve`` runs (compiled where it applies): verification
passes ride the compiled buckets there."""

COPY_CODE = '''def moving_average(values, window):
    """Return the averages of each run of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    averages = []
    total = sum(values[:window])
    averages.append(total / window)
    for i in range(window, len(values)):
        total += values[i] - values[i - window]
        averages.append(total / widnow)
    return averages
'''
PROMPTS = {
    "copy-heavy": "Fix the typo in this function and print the whole function again:\n\n"
                  + COPY_CODE,
    "open": "Why do people enjoy walking in the mountains? Give a few reasons.",
}


def _run(eng, prompt: str, n: int, spec: bool, k: int):
    from engine.params import SamplingParams

    h = eng.submit(prompt, SamplingParams(temperature=0, max_tokens=n), cache_salt=fresh_salt(),
                   speculative="ngram" if spec else False, num_speculative_tokens=k)
    out = h.result()
    if not out.finished_ok:
        raise RuntimeError(f"engine request ended with {out.finish_reason}: {out.error}")
    return out, list(h.events)


def run(loaded, quick: bool = False, progress=None, engine=None, new_tokens: int | None = None,
        pairs: int | None = None, num_speculative_tokens: int = 3,
        prompts: dict[str, str] | None = None) -> dict:
    """Measure both prompts, plain and speculative, in alternating turns.

    Args:
        loaded: the :class:`engine.model.model_info.LoadedModel`.
        quick: 24 new tokens and 1 pair instead of 128 and 3.
        progress: ``progress(fraction, message)`` callback or ``None``.
        engine: an ``LLMEngine`` to run through (when ``None``, a private one with the decode
            step `serve` runs: compiled where it applies, see :func:`.common.engine_for`).
        new_tokens, pairs, num_speculative_tokens: override the sizes.
        prompts: ``{name: chat prompt}`` instead of :data:`PROMPTS`.
    """
    n = new_tokens or (24 if quick else 128)
    pairs = pairs or (1 if quick else 3)
    k = num_speculative_tokens
    rows, by_k = [], defaultdict(list)
    prompts = prompts or PROMPTS
    total = len(prompts) * (pairs + 1)
    done = 0
    with engine_for(loaded, engine, served=True) as eng:
        config = engine_config(eng)
        for name, base in prompts.items():
            plain_rates, spec_rates, same, last = [], [], True, None
            prompt = base
            for turn in range(pairs + 1):  # turn 0 warms both up and is not counted
                report(progress, done / total, f"{name}: turn {turn} of {pairs}")
                a, _ = _run(eng, prompt, n, False, k)
                b, ev = _run(eng, prompt, n, True, k)
                done += 1
                same = same and a.token_ids == b.token_ids
                if turn == 0:
                    continue
                plain_rates.append(a.metrics.decode_tokens_per_s)
                spec_rates.append(b.metrics.decode_tokens_per_s)
                last = b
                seen = set()
                for e in ev:
                    key = (e.start_s, e.end_s)
                    if e.phase == "decode" and key not in seen:
                        seen.add(key)
                        by_k[e.num_drafted].append(e.duration_s * 1000.0)
            ratios = [s / p for p, s in zip(plain_rates, spec_rates) if p > 0]
            s = last.speculative
            rows.append({"name": name, "prompt_tokens": len(last.prompt_token_ids),
                         "output_tokens": len(last.token_ids),
                         "plain_tok_s": plain_rates, "spec_tok_s": spec_rates, "ratios": ratios,
                         "ratio_median": median(ratios), "identical_tokens": same,
                         "acceptance_rate": s["acceptance_rate"],
                         "mean_accepted_length": s["mean_accepted_length"],
                         "tokens_per_step": s["tokens_per_step"]})
    report(progress, 1.0, "done")
    verify_ms = {str(d): median(v) for d, v in sorted(by_k.items())}
    one = verify_ms.get("0", 0.0)
    cost = {d: (ms / one if one else 0.0) for d, ms in verify_ms.items()}
    res = result(NAME, TITLE, quick, {"new_tokens": n, "pairs": pairs,
                                      "num_speculative_tokens": k}, engine=config,
                 new_tokens=n, pairs=pairs, num_speculative_tokens=k, rows=rows,
                 verify_ms=verify_ms, verify_cost=cost)
    for r in rows:
        res["summary"] += [
            row(f"{r['name']}: decode speed-up (median of pairs)", r["ratio_median"], "x"),
            row(f"{r['name']}: acceptance rate", r["acceptance_rate"], ""),
            row(f"{r['name']}: tokens per decode pass", r["tokens_per_step"], ""),
            row(f"{r['name']}: answer tokens", r["output_tokens"], ""),
            row(f"{r['name']}: identical greedy tokens", str(r["identical_tokens"]), ""),
        ]
    if str(k) in cost:
        res["summary"].append(row(f"cost of verifying {k} drafts vs decoding 1 token",
                                  cost[str(k)], "x"))
    res["notes"].append("Ratios compare neighbouring turns of one run (plain, speculative, "
                        "plain, ...); decode tokens/s = (output tokens - 1) / decode time; each "
                        "answer stops at its end of sequence token or at the token cap.")
    return res


def plot(res: dict, path: str) -> str:
    """Speed-up per prompt, and the cost of a step by drafts verified."""
    from engine.experiments.plotting import ENGINE, OTHER, figure, save

    fig, (ax1, ax2) = figure(res["title"], ncols=2)
    names = [r["name"] for r in res["rows"]]
    ax1.bar(names, [r["ratio_median"] for r in res["rows"]], color=[ENGINE, OTHER][:len(names)])
    ax1.axhline(1.0, color="grey", lw=0.8)
    ax1.set_ylabel("decode tok/s, speculative / plain")
    for i, r in enumerate(res["rows"]):
        ax1.text(i, r["ratio_median"], f"{r['ratio_median']:.2f}x\naccept {r['acceptance_rate']:.0%}",
                 ha="center", va="bottom", fontsize=8)
    ks = list(res["verify_cost"])
    ax2.bar(ks, [res["verify_cost"][x] for x in ks], color=ENGINE)
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.set_xlabel("draft tokens verified in the step (0 = plain decode)")
    ax2.set_ylabel("step time / one-token step")
    return save(fig, path, f"greedy answers of up to {res['new_tokens']} tokens, {res['pairs']} pairs, "
                           f"k = {res['num_speculative_tokens']}")
