"""Experiment ``batch``: latency per token and total throughput as concurrent sequences grow.

Until the engine batches (continuous batching is a later issue), the only backend is Hugging
Face ``generate`` with left-padded batches; the plot says so. A backend is a function
``(loaded, prompts, new_tokens) -> row`` in :data:`BACKENDS`, so an engine-batched one can be
added beside it. Result fields beyond the common ones (see :mod:`.common`):

- ``backend``: the backend's name; ``backend_note``: what it measures.
- ``batch_sizes``, ``new_tokens`` (per sequence).
- ``rows``: one per batch size with ``batch``, ``padded_prompt_tokens``, ``ttft_s``,
  ``e2e_s``, ``per_token_latency_ms`` (decode time / (new tokens − 1): one step, which gives
  every sequence a token), ``throughput_tokens_per_s`` (batch × new tokens / e2e) and
  ``decode_throughput_tokens_per_s`` (batch × (new tokens − 1) / decode time).
"""

from __future__ import annotations

from .common import report, result, row
from .hf import hf_generate

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


def hf_padded(loaded, prompts: list[list[int]], new_tokens: int) -> dict:
    """Backend ``hf-generate-padded``: one ``generate`` call on the left-padded batch."""
    r = hf_generate(loaded, prompts, new_tokens)
    b, steps = len(prompts), len(r["step_times_s"])
    return {"batch": b, "padded_prompt_tokens": r["padded_len"], "ttft_s": r["ttft_s"],
            "e2e_s": r["e2e_s"],
            "per_token_latency_ms": r["decode_time_s"] * 1000 / (steps - 1) if steps > 1 else 0.0,
            "throughput_tokens_per_s": b * steps / r["e2e_s"] if r["e2e_s"] > 0 else 0.0,
            "decode_throughput_tokens_per_s":
                b * (steps - 1) / r["decode_time_s"] if r["decode_time_s"] > 0 else 0.0}


BACKENDS = {
    "hf-generate-padded": (hf_padded, "Hugging Face generate, left-padded batches (the engine "
                                      "runs one sequence at a time until continuous batching)"),
}


def run(loaded, quick: bool = False, progress=None, engine=None, batch_sizes: list[int] | None = None,
        new_tokens: int | None = None, backend: str = "hf-generate-padded") -> dict:
    """Run each batch size once (after a warm-up) with one backend.

    Args:
        loaded: the :class:`engine.loader.LoadedModel`.
        quick: batches 1, 2, 4 with 12 new tokens instead of 1 to 16 with 64.
        progress: ``progress(fraction, message)`` callback or ``None``.
        engine: unused by the ``generate`` backend (kept for a uniform signature).
        batch_sizes, new_tokens, backend: override the sizes or the backend.
    """
    from ..prompt import encode_prompt

    sizes = list(batch_sizes or ([1, 2, 4] if quick else [1, 2, 4, 8, 16]))
    new_tokens = new_tokens or (12 if quick else 64)
    fn, note = BACKENDS[backend]
    ids = [encode_prompt(loaded.tokenizer, p) for p in PROMPTS]
    res = result(NAME, TITLE, quick, {"batch_sizes": sizes, "new_tokens": new_tokens},
                 backend=backend, backend_note=note, batch_sizes=sizes, new_tokens=new_tokens)
    report(progress, 0.0, "warm-up")
    fn(loaded, ids[:2], 4)
    rows, done, total = [], 0, sum(sizes)
    for b in sizes:
        report(progress, done / total, f"batch {b}")
        rows.append(fn(loaded, [ids[i % len(ids)] for i in range(b)], new_tokens))
        done += b
    report(progress, 1.0, "done")
    res["rows"] = rows
    for r in rows:
        res["summary"].append(row(f"batch {r['batch']}", r["throughput_tokens_per_s"],
                                  f"tok/s total, {r['per_token_latency_ms']:.0f} ms per step"))
    res["notes"].append(f"Backend: {note}.")
    return res


def plot(res: dict, path: str) -> str:
    """Per-step latency and total throughput against batch size."""
    from .plotting import ENGINE, OTHER, figure, save

    fig, (ax1, ax2) = figure(res["title"], ncols=2, width=5.0)
    rows = res["rows"]
    b = [r["batch"] for r in rows]
    ax1.plot(b, [r["per_token_latency_ms"] for r in rows], "o-", color=OTHER)
    ax1.set_ylabel("latency per token of each sequence (ms)")
    ax2.plot(b, [r["throughput_tokens_per_s"] for r in rows], "o-", color=ENGINE)
    ax2.set_ylabel("total throughput (tokens/s)")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(b, [str(x) for x in b])
        ax.set_xlabel("batch size (sequences)")
        ax.set_ylim(bottom=0)
    return save(fig, path, f"measured with {res['backend_note']}; {res['new_tokens']} new tokens "
                           f"per sequence")
