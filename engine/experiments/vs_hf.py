"""Experiment ``vs-hf``: our engine against Hugging Face ``generate``, same model, same tokens.

Both run greedy to the same fixed token count on the same prompt ids, alternately (engine,
generate, engine, generate, ...) after one warm-up each, so slow drifts of a shared machine hit
both sides alike. Result fields beyond the common ones (see :mod:`.common`):

- ``prompt_tokens``, ``new_tokens``: sizes of each run.
- ``pairs``: one ``{"engine": {...}, "hf": {...}}`` per pair, each side with ``ttft_s``,
  ``decode_tokens_per_s`` and ``e2e_s``.
- ``engine_decode_tokens_per_s``, ``hf_decode_tokens_per_s``, ``engine_ttft_s``, ``hf_ttft_s``:
  medians over the pairs.
- ``decode_ratio``: median over pairs of engine / generate decode tokens/s (> 1: engine faster).
- ``ttft_ratio``: median over pairs of engine / generate TTFT (< 1: engine faster).
- ``identical_tokens``: every run of both produced the same token ids;
  ``first_mismatch``: index of the first differing token of the first differing run, or ``None``.
"""

from __future__ import annotations

from engine.experiments.common import (STORY_PROMPT, engine_config, engine_for, median, report, result, row,
                     first_mismatch, run_engine, salted)
from engine.experiments.hf import hf_generate

NAME = "vs-hf"
TITLE = "Engine vs Hugging Face generate (greedy, batch 1)"


def run(loaded, quick: bool = False, progress=None, engine=None, pairs: int | None = None,
        new_tokens: int | None = None) -> dict:
    """Run the A B A B comparison.

    Args:
        loaded: the :class:`engine.model.model_info.LoadedModel`.
        quick: small sizes (2 pairs of 24 tokens) instead of 5 pairs of 128.
        progress: ``progress(fraction, message)`` callback or ``None``.
        engine: an ``LLMEngine`` to run through (a private one when ``None``).
        pairs, new_tokens: override the sizes.
    """
    pairs = pairs or (2 if quick else 5)
    new_tokens = new_tokens or (24 if quick else 128)
    from engine.model.prompt import encode_prompt

    out = result(NAME, TITLE, quick, {"pairs": pairs, "new_tokens": new_tokens,
                                      "prompt": STORY_PROMPT, "order": "engine, generate, ..."},
                 new_tokens=new_tokens)
    runs, first_bad, sizes = [], None, []
    with engine_for(loaded, engine) as eng:
        out["engine"] = engine_config(eng)
        report(progress, 0.0, "warm-up")
        warm = salted(STORY_PROMPT)
        run_engine(eng, warm, 8)
        hf_generate(loaded, [encode_prompt(loaded.tokenizer, warm)], 8)
        total = 2 * pairs
        for i in range(pairs):
            prompt = salted(STORY_PROMPT)  # fresh per pair: no prefix-cache hits
            ids = encode_prompt(loaded.tokenizer, prompt)
            sizes.append(len(ids))
            report(progress, (2 * i) / total, f"pair {i + 1}/{pairs}: engine")
            res, _ = run_engine(eng, prompt, new_tokens)
            m = res.metrics
            mine = {"ttft_s": m.ttft_s, "decode_tokens_per_s": m.decode_tokens_per_s,
                    "e2e_s": m.e2e_s}
            report(progress, (2 * i + 1) / total, f"pair {i + 1}/{pairs}: HF generate")
            ref = hf_generate(loaded, [ids], new_tokens)
            theirs = {k: ref[k] for k in ("ttft_s", "decode_tokens_per_s", "e2e_s")}
            runs.append({"engine": mine, "hf": theirs})
            bad = first_mismatch(res.token_ids, ref["token_ids"][0])
            if bad is not None and first_bad is None:
                first_bad = bad
    report(progress, 1.0, "done")
    eng_tps = [p["engine"]["decode_tokens_per_s"] for p in runs]
    hf_tps = [p["hf"]["decode_tokens_per_s"] for p in runs]
    out.update(
        pairs=runs, prompt_tokens=max(sizes),
        engine_decode_tokens_per_s=median(eng_tps), hf_decode_tokens_per_s=median(hf_tps),
        engine_ttft_s=median(p["engine"]["ttft_s"] for p in runs),
        hf_ttft_s=median(p["hf"]["ttft_s"] for p in runs),
        decode_ratio=median(a / b for a, b in zip(eng_tps, hf_tps) if b > 0),
        ttft_ratio=median(p["engine"]["ttft_s"] / p["hf"]["ttft_s"] for p in runs
                          if p["hf"]["ttft_s"] > 0),
        identical_tokens=first_bad is None, first_mismatch=first_bad)
    out["summary"] = [
        row("engine decode", out["engine_decode_tokens_per_s"], "tok/s"),
        row("HF generate decode", out["hf_decode_tokens_per_s"], "tok/s"),
        row("decode ratio engine/HF (median of pairs)", out["decode_ratio"], "x"),
        row("engine TTFT", out["engine_ttft_s"] * 1000, "ms"),
        row("HF generate TTFT", out["hf_ttft_s"] * 1000, "ms"),
        row("identical tokens", "yes" if out["identical_tokens"] else f"no (from {first_bad})"),
    ]
    out["notes"].append("Engine TTFT is measured from submit (queue included); generate's from "
                        "the call. Decode tokens/s = (tokens - 1) / (last - first token time).")
    return out


def plot(res: dict, path: str) -> str:
    """Bars of decode tokens/s and TTFT, one pair of bars per A/B pair, medians in the title."""
    from engine.experiments.plotting import ENGINE, OTHER, figure, save

    fig, (ax1, ax2) = figure(res["title"], ncols=2, width=5.0)
    pairs = res["pairs"]
    xs = list(range(1, len(pairs) + 1))
    w = 0.38
    for ax, key, scale, label in ((ax1, "decode_tokens_per_s", 1, "decode tokens/s"),
                                  (ax2, "ttft_s", 1000, "TTFT (ms)")):
        ax.bar([x - w / 2 for x in xs], [p["engine"][key] * scale for p in pairs], w,
               color=ENGINE, label="engine")
        ax.bar([x + w / 2 for x in xs], [p["hf"][key] * scale for p in pairs], w,
               color=OTHER, label="HF generate")
        ax.set_xlabel("pair (engine then generate)")
        ax.set_ylabel(label)
        ax.set_xticks(xs)
        ax.legend(fontsize=8)
    ax1.set_title(f"median ratio engine/HF = {res['decode_ratio']:.2f}x", fontsize=10)
    ax2.set_title(f"median ratio engine/HF = {res['ttft_ratio']:.2f}x", fontsize=10)
    same = "identical tokens" if res["identical_tokens"] else "tokens differ"
    return save(fig, path, f"{res['prompt_tokens']}-token prompt, {res['new_tokens']} new tokens, "
                           f"greedy; {same}")
