"""The batch experiment's parallel-samples case: ``G`` requests with ``n`` samples each against
``G × n`` independent requests making the same tokens.

Both sides run the same seeded sampling (sample ``k`` of a request seeded ``s`` equals an
independent request seeded :func:`engine.params.sample_seed` ``(s, k)``), with EOS ignored, so
they produce the same number of tokens. The groups prefill each prompt once and their samples
share the prompt's KV blocks; the independent requests prefill it up to ``n`` times and hold
their own blocks (the prefix cache shares the prompt's *full* blocks with those that arrive after
the first one computed them, never the last, partial one). Measured side by side, alternating (A B A B after a warm-up of each): total throughput
(generated tokens / wall time) and the peak of KV blocks in use (from the steps' figures).
"""

from __future__ import annotations

import time

from engine.experiments.common import median, report, salted
from engine.params import SamplingParams, sample_seed

PROMPT = "Write a short story about a lighthouse keeper and a storm."


def _submit(engine, prompt: str, params: SamplingParams):
    """Submit, waiting while the engine's queue is full (more requests than it queues)."""
    from engine.errors import QueueFullError

    while True:
        try:
            return engine.submit(prompt, params)
        except QueueFullError:
            time.sleep(0.005)


def _run(engine, prompts: list[str], n: int, new_tokens: int, grouped: bool) -> dict:
    """One side: ``prompts`` as requests with ``n`` samples, or as ``n`` requests each."""
    def params(seed: int, n_: int) -> SamplingParams:
        return SamplingParams(temperature=1.0, max_tokens=new_tokens, ignore_eos=True,
                              seed=seed, n=n_)

    t0 = time.perf_counter()
    if grouped:
        handles = [engine.submit(p, params(1000 + i, n)) for i, p in enumerate(prompts)]
    else:
        handles = [_submit(engine, p, params(sample_seed(1000 + i, k), 1))
                   for i, p in enumerate(prompts) for k in range(n)]
    outs = [h.result() for h in handles]
    wall = time.perf_counter() - t0
    bad = [o for o in outs if not o.finished_ok]
    if bad:
        raise RuntimeError(f"request ended with {bad[0].finish_reason}: {bad[0].error}")
    tokens = sum(len(o.token_ids) for out in outs for o in out.outputs)
    peak = max((e.batch.blocks_used for h in handles for e in h.events if e.batch is not None),
               default=0)
    prefill = {}
    for h in handles:
        for e in h.events:
            if e.batch is not None:
                prefill[e.batch.step_id] = e.batch.prefill_tokens
    return {"wall_s": wall, "tokens": tokens, "throughput_tokens_per_s": tokens / wall,
            "peak_blocks_used": peak, "prefill_tokens": sum(prefill.values()),
            "sequences": len(prompts) * n}


def compare(engine, groups: int = 16, n: int = 4, new_tokens: int = 32, repeats: int = 3,
            progress=None) -> dict:
    """Run both sides ``repeats`` times, alternating, and report the medians.

    Returns:
        ``{"groups", "n", "new_tokens", "grouped": {...}, "independent": {...},
        "throughput_ratio", "blocks_ratio", "ratio_runs"}``: each side's median throughput
        (tokens/s), peak blocks and prefill tokens; ratios grouped / independent.
    """
    runs: dict[str, list[dict]] = {"grouped": [], "independent": []}
    for side in runs:  # warm-up
        _run(engine, [salted(PROMPT)], n, 4, side == "grouped")
    for i in range(repeats):
        for side in runs:
            report(progress, 0.98, f"{groups} requests n={n} vs {groups * n} independent "
                                   f"({side}, {i + 1}/{repeats})")
            prompts = [salted(f"{PROMPT} ({j})") for j in range(groups)]
            runs[side].append(_run(engine, prompts, n, new_tokens, side == "grouped"))
    ratios = [g["throughput_tokens_per_s"] / x["throughput_tokens_per_s"]
              for g, x in zip(runs["grouped"], runs["independent"])]
    sides = {side: {k: median(r[k] for r in rs) for k in
                    ("throughput_tokens_per_s", "peak_blocks_used", "prefill_tokens", "wall_s")}
             for side, rs in runs.items()}
    return {"groups": groups, "n": n, "new_tokens": new_tokens, **sides,
            "throughput_ratio": median(ratios), "ratio_runs": ratios,
            "blocks_ratio": sides["grouped"]["peak_blocks_used"]
            / max(1, sides["independent"]["peak_blocks_used"])}
