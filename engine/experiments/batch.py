"""Experiment ``batch``: latency per token and total throughput as concurrent sequences grow.

Two backends, each a function ``(loaded, engine, prompts, new_tokens) -> row`` in
:data:`BACKENDS`: ``engine`` submits every sequence at once to our engine (continuous batching
over the paged KV cache), ``hf-generate-padded`` runs Hugging Face ``generate`` on one
left-padded batch. Result fields beyond the common ones (see :mod:`.common`):

- ``backends`` (names run), ``backend_notes`` (name -> what it measures).
- ``batch_sizes``, ``new_tokens`` (per sequence), ``repeats`` (runs per size and backend).
- ``rows``: one per backend and batch size with ``backend``, ``batch``, ``prompt_tokens``
  (longest prompt; for padded ``generate`` every row is padded to it), ``ttft_s`` (median over
  sequences), ``e2e_s`` (first submit to last token), ``per_token_latency_ms`` (time between
  two tokens of one sequence, median), ``throughput_tokens_per_s`` (batch × new tokens / e2e)
  and ``decode_throughput_tokens_per_s`` (batch × (new tokens − 1) / time from the moment every
  sequence had its first token to the last token), each the median of that field over the
  runs (an odd number of runs keeps throughput = batch × new tokens ÷ e2e exact, since the
  median of a decreasing function of e2e is that function of e2e's median);
  ``cached_prompt_tokens`` (prompt tokens the prefix cache served, summed over the runs; every
  request has its own cache salt, so 0); ``throughput_runs`` and ``per_token_latency_runs_ms`` hold every run's figures, in run order.
- ``mixed`` (both backends run): the same requests with different answer lengths
  (:func:`mixed_lengths`): useful tokens/s of each backend, when each request finished, and
  the throughput ratio engine / padded generate (the run with the median ratio;
  ``ratio_runs`` holds every run's).
- ``parallel_samples`` (the ``engine`` backend run): 16 requests with ``n = 4`` samples against
  64 independent requests making the same tokens (4 against 16 when quick): throughput and peak
  KV blocks of each, and their ratios (:mod:`engine.experiments.parallel_samples`).
"""

from __future__ import annotations

import time

from engine.experiments.common import (engine_config, engine_for, fresh_salt, greedy, median, report, result, row,
                                       salted)
from engine.experiments.hf import hf_generate

NAME = "batch"
TITLE = "Batch size: latency per token vs total throughput"
PROMPTS = [
    "What is a KV cache?",
    "Explain prefill and decode in two sentences.",
    "Write a haiku about memory bandwidth.",
    "Why does a language model generate one token at a time? Answer for a beginner.",
    "List three ways to make inference faster.",
    "Describe a lighthouse at night.",
    "What does the temperature setting change when sampling the next token from a model?",
    "Give a short definition of throughput.",
]


def _rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


def engine_batch(loaded, engine, prompts: list[str], new_tokens: int) -> dict:
    """Backend ``engine``: submit every prompt at once and wait for all (greedy, EOS ignored),
    each with its own cache salt, so the prefix cache shares nothing between them."""
    t0 = time.perf_counter()
    handles = [engine.submit(p, greedy(new_tokens), source="lesson", cache_salt=fresh_salt()) for p in prompts]
    outs = [h.result() for h in handles]
    end = time.perf_counter()
    bad = [o for o in outs if not o.finished_ok]
    if bad:
        raise RuntimeError(f"engine request ended with {bad[0].finish_reason}: {bad[0].error}")
    firsts = [h.events[0].end_s for h in handles]
    lasts = [h.events[-1].end_s for h in handles]
    b = len(prompts)
    return {"batch": b, "prompt_tokens": max(len(o.prompt_token_ids) for o in outs),
            "ttft_s": median(o.metrics.ttft_s for o in outs), "e2e_s": end - t0,
            "per_token_latency_ms": median(o.metrics.tpot_s for o in outs) * 1000,
            "throughput_tokens_per_s": _rate(b * new_tokens, end - t0),
            "decode_throughput_tokens_per_s": _rate(b * (new_tokens - 1), max(lasts) - max(firsts)),
            "cached_prompt_tokens": sum(o.metrics.cached_prompt_tokens for o in outs)}


def hf_padded(loaded, engine, prompts: list[str], new_tokens: int) -> dict:
    """Backend ``hf-generate-padded``: one ``generate`` call on the left-padded batch."""
    from engine.model.prompt import encode_prompt

    r = hf_generate(loaded, [encode_prompt(loaded.tokenizer, p) for p in prompts], new_tokens)
    b, steps = len(prompts), len(r["step_times_s"])
    return {"batch": b, "prompt_tokens": r["padded_len"], "ttft_s": r["ttft_s"], "e2e_s": r["e2e_s"],
            "per_token_latency_ms": r["decode_time_s"] * 1000 / (steps - 1) if steps > 1 else 0.0,
            "throughput_tokens_per_s": _rate(b * steps, r["e2e_s"]),
            "decode_throughput_tokens_per_s": _rate(b * (steps - 1), r["decode_time_s"]),
            "cached_prompt_tokens": 0}


def mixed_lengths(loaded, engine, prompts: list[str], lengths: list[int]) -> dict:
    """The same requests, each with its own answer length, through both backends.

    Continuous batching lets a request leave as soon as its own answer is done; a static padded
    batch runs every row until the longest answer is done, so short requests wait for it and
    the extra steps are wasted. Useful tokens are each request's own ``max_tokens``.

    Returns:
        ``{"lengths", "useful_tokens", "engine": {...}, "hf-generate-padded": {...},
        "throughput_ratio"}`` where each backend has ``e2e_s`` (all done), ``useful_tokens_per_s``,
        ``request_e2e_s`` (per request, seconds from the start) and ``median_request_e2e_s``.
    """
    from engine.model.prompt import encode_prompt

    useful = sum(lengths)
    t0 = time.perf_counter()
    handles = [engine.submit(p, greedy(n), source="lesson") for p, n in zip(prompts, lengths)]
    outs = [h.result() for h in handles]
    t_engine = time.perf_counter() - t0
    done_at = [h.events[-1].end_s - t0 for h in handles]
    bad = [o for o in outs if not o.finished_ok]
    if bad:
        raise RuntimeError(f"engine request ended with {bad[0].finish_reason}: {bad[0].error}")
    r = hf_generate(loaded, [encode_prompt(loaded.tokenizer, p) for p in prompts], max(lengths))
    eng_row = {"e2e_s": t_engine, "useful_tokens_per_s": _rate(useful, t_engine),
               "request_e2e_s": done_at, "median_request_e2e_s": median(done_at)}
    hf_row = {"e2e_s": r["e2e_s"], "useful_tokens_per_s": _rate(useful, r["e2e_s"]),
              "request_e2e_s": [r["e2e_s"]] * len(prompts), "median_request_e2e_s": r["e2e_s"]}
    return {"lengths": list(lengths), "useful_tokens": useful, "engine": eng_row,
            "hf-generate-padded": hf_row,
            "throughput_ratio": _rate(eng_row["useful_tokens_per_s"], hf_row["useful_tokens_per_s"])}


MIXED_LENGTHS = [8, 16, 32, 64, 128]


BACKENDS = {
    "engine": (engine_batch, "our engine: all sequences submitted at once, continuous batching "
                             "over the paged KV cache"),
    "hf-generate-padded": (hf_padded, "Hugging Face generate on one left-padded batch"),
}


def _median_run(runs: list[dict], key: str) -> dict:
    """The run whose ``key`` is the median (the lower middle one for an even count), so
    every field of the row comes from one and the same run."""
    return sorted(runs, key=lambda r: r[key])[(len(runs) - 1) // 2]


def median_fields(runs: list[dict]) -> dict:
    """One row from several runs of one batch size: every number the median of that field over
    the runs (``batch`` and ``prompt_tokens`` are the same in each run; ``cached_prompt_tokens``
    is summed over them), plus ``throughput_runs`` (tokens/s) and ``per_token_latency_runs_ms``
    (ms) of every run."""
    out = {k: median(r[k] for r in runs) for k in runs[0]}
    out.update(batch=runs[0]["batch"], prompt_tokens=runs[0]["prompt_tokens"],
               cached_prompt_tokens=sum(int(r["cached_prompt_tokens"]) for r in runs))
    out["throughput_runs"] = [r["throughput_tokens_per_s"] for r in runs]
    out["per_token_latency_runs_ms"] = [r["per_token_latency_ms"] for r in runs]
    return out


def run(loaded, quick: bool = False, progress=None, engine=None, batch_sizes: list[int] | None = None,
        new_tokens: int | None = None, backends: list[str] | None = None,
        repeats: int | None = None, parallel_samples: bool = True) -> dict:
    """Run each batch size on every backend, alternating backends (after a warm-up of each).

    Timings on a shared machine drift by ±15% over a minute, so the sizes take turns: ``repeats``
    rounds, each running every size once (1, 2, 4, ..., then 1, 2, 4, ... again), the backends
    alternating within each size, so a slow minute touches every size alike; each row holds the
    medians over its runs (:func:`median_fields`).

    Args:
        loaded: the :class:`engine.model.model_info.LoadedModel`.
        quick: batches 1, 2, 4 with 12 new tokens, once each, instead of 1 to 32 with 64
            new tokens, three times each.
        progress: ``progress(fraction, message)`` callback or ``None``.
        engine: an ``LLMEngine`` for the ``engine`` backend (a private one when ``None``).
        batch_sizes, new_tokens, backends, repeats: override the sizes, the answer length,
            the backends (names of :data:`BACKENDS`) or the runs per size.
    """
    sizes = list(batch_sizes or ([1, 2, 4] if quick else [1, 2, 4, 8, 16, 32]))
    new_tokens = new_tokens or (12 if quick else 64)
    repeats = repeats or (1 if quick else 3)
    names = list(backends or BACKENDS)
    res = result(NAME, TITLE, quick, {"batch_sizes": sizes, "new_tokens": new_tokens,
                                      "repeats": repeats},
                 backends=names, backend_notes={n: BACKENDS[n][1] for n in names},
                 batch_sizes=sizes, new_tokens=new_tokens, repeats=repeats)
    rows, done, total = [], 0, sum(sizes) * len(names) * repeats
    with engine_for(loaded, engine) as eng:
        res["engine"] = engine_config(eng)
        for name in names:
            report(progress, 0.0, f"{name}: warm-up")
            BACKENDS[name][0](loaded, eng, [salted(p) for p in PROMPTS[:2]], 4)
        runs: dict[tuple[str, int], list[dict]] = {(n, b): [] for n in names for b in sizes}
        for i in range(repeats):  # the sizes take turns, round after round
            for b in sizes:
                for name in names:
                    report(progress, done / total, f"{name}: batch {b} (round {i + 1} of {repeats})")
                    prompts = [salted(PROMPTS[j % len(PROMPTS)]) for j in range(b)]
                    runs[(name, b)].append(BACKENDS[name][0](loaded, eng, prompts, new_tokens))
                    done += b
        rows = [{"backend": name, **median_fields(runs[(name, b)])} for name in names for b in sizes]
        if set(names) == set(BACKENDS):
            n_mixed = 4 if quick else 16
            lengths = [(MIXED_LENGTHS[:3] if quick else MIXED_LENGTHS)[i % (3 if quick else 5)]
                       for i in range(n_mixed)]
            mixed_runs = []
            for i in range(repeats):
                report(progress, 0.97, f"mixed answer lengths: {n_mixed} requests ({i + 1}/{repeats})")
                mixed_runs.append(mixed_lengths(
                    loaded, eng, [salted(PROMPTS[j % len(PROMPTS)]) for j in range(n_mixed)],
                    lengths))
            res["mixed"] = {**_median_run(mixed_runs, "throughput_ratio"),
                            "ratio_runs": [m["throughput_ratio"] for m in mixed_runs]}
        if "engine" in names and parallel_samples:
            from engine.experiments.parallel_samples import compare

            res["parallel_samples"] = compare(eng, 4 if quick else 16, 4, 8 if quick else 32,
                                              repeats, progress)
    report(progress, 1.0, "done")
    res["rows"] = rows
    for r in rows:
        res["summary"].append(row(f"{r['backend']}, batch {r['batch']}", r["throughput_tokens_per_s"],
                                  f"tok/s total, {r['per_token_latency_ms']:.0f} ms per token"))
    by = {(r["backend"], r["batch"]): r["throughput_tokens_per_s"] for r in rows}
    if set(names) == set(BACKENDS):
        for b in sizes:
            res["summary"].append(row(f"engine / padded generate, batch {b}",
                                      _rate(by[("engine", b)], by[("hf-generate-padded", b)]), "x"))
    if "engine" in names and 1 in sizes:  # scaling of aggregate decode tokens/s (no prefill)
        dec = {r["batch"]: r["decode_throughput_tokens_per_s"] for r in rows
               if r["backend"] == "engine"}
        for b in (b for b in sizes if b > 1):
            res["summary"].append(row(f"engine, batch {b} / batch 1 decode throughput",
                                      _rate(dec[b], dec[1]), "x"))
    if repeats > 1:
        res["notes"].append(f"Each size ran {repeats} times, the sizes taking turns round after round "
                            "and the backends alternating; each row holds the medians of its runs.")
    mixed = res.get("mixed")
    if mixed:
        n = len(mixed["lengths"])
        for name in ("engine", "hf-generate-padded"):
            m = mixed[name]
            res["summary"].append(row(f"{name}, {n} requests of mixed lengths",
                                      m["useful_tokens_per_s"],
                                      f"useful tok/s; median request done after "
                                      f"{m['median_request_e2e_s']:.1f} s"))
        res["summary"].append(row("mixed lengths: engine / padded generate throughput",
                                  mixed["throughput_ratio"], "x"))
        res["notes"].append(f"Mixed lengths: answers of {sorted(set(mixed['lengths']))} tokens; "
                            "padded generate runs every row to the longest.")
    ps = res.get("parallel_samples")
    if ps:
        label = f"{ps['groups']} requests n={ps['n']} vs {ps['groups'] * ps['n']} independent"
        res["summary"].append(row(f"{label}: throughput ratio", ps["throughput_ratio"], "x"))
        res["summary"].append(row(f"{label}: peak KV blocks", ps["grouped"]["peak_blocks_used"],
                                  f"blocks vs {ps['independent']['peak_blocks_used']:.0f} "
                                  f"({ps['blocks_ratio']:.2f}x)"))
    for n in names:
        res["notes"].append(f"Backend {n}: {BACKENDS[n][1]}.")
    return res


def plot(res: dict, path: str) -> str:
    """Per-token latency and total throughput against batch size, one line per backend."""
    from engine.experiments.plotting import ENGINE, OTHER, THIRD, figure, save

    mixed = res.get("mixed")
    axes = figure(res["title"], ncols=3 if mixed else 2, width=5.0)[1]
    ax1, ax2 = axes[0], axes[1]
    colors = {"engine": ENGINE, "hf-generate-padded": OTHER}
    labels = {"engine": "engine (continuous batching)", "hf-generate-padded": "HF generate (padded)"}
    for name in res["backends"]:
        rows = [r for r in res["rows"] if r["backend"] == name]
        b = [r["batch"] for r in rows]
        style = {"color": colors.get(name, THIRD), "label": labels.get(name, name)}
        ax1.plot(b, [r["per_token_latency_ms"] for r in rows], "o-", **style)
        ax2.plot(b, [r["throughput_tokens_per_s"] for r in rows], "o-", **style)
    ax1.set_ylabel("latency per token of each sequence (ms)")
    ax2.set_ylabel("total throughput (tokens/s)")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(res["batch_sizes"], [str(x) for x in res["batch_sizes"]])
        ax.set_xlabel("concurrent sequences")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    if mixed:
        ax3 = axes[2]
        order = sorted(range(len(mixed["lengths"])), key=lambda i: mixed["lengths"][i])
        for name in ("engine", "hf-generate-padded"):
            done = mixed[name]["request_e2e_s"]
            ax3.plot(range(len(order)), [done[i] for i in order], "o-", color=colors[name],
                     label=f"{labels[name]}: {mixed[name]['useful_tokens_per_s']:.0f} useful tok/s")
        ax3.set_xticks(range(len(order)), [str(mixed["lengths"][i]) for i in order], fontsize=7)
        ax3.set_xlabel("requests by answer length (tokens)")
        ax3.set_ylabel("request finished after (s)")
        ax3.set_ylim(bottom=0)
        ax3.legend(fontsize=8)
    fig = axes[0].figure
    return save(fig, path, f"{res['new_tokens']} new tokens per sequence, greedy; generate pads "
                           "every prompt to the longest")
