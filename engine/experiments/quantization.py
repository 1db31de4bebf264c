"""Experiment ``quantization``: every weights option and KV cache dtype, quality beside cost.

Each variant (weights storage × KV cache storage, :data:`VARIANTS`) is loaded once, scored on
the text that ships with the project (``assets/quality-text.txt``: English, Chinese and code)
and timed; the variants take turns, so slow moments of a shared machine fall on all of them.

Quality, under teacher forcing (the text itself is the input; every position predicts the
next token), against the fp32 model with an fp32 cache:

- ``perplexity``: exp of the mean negative log-likelihood of the text's next tokens;
- ``top1_agreement``: share of positions whose most likely next token equals fp32's;
- ``kl_mean``: mean KL(p_fp32 ‖ p_variant) of the next-token distributions, in nats.

The forward pass goes through the paged attention with the variant's KV pool, so keys and
values are stored and read back in the KV dtype exactly as when serving.

Cost: ``weights_bytes`` (measured storage: packed codes, scales and zeros for quantized
weights), ``kv_bytes_per_token`` (measured pool bytes per token slot) beside the formula's
``kv_bytes_per_token_formula``, ``decode_tokens_per_s`` (batch 1), ``prefill_tokens_per_s``
(one prompt of ``prefill_tokens``), ``batch_tokens_per_s`` (``batch`` requests at once, total
new tokens / wall time). Each speed is the median of ``repeats`` runs; ratios are to fp32.
"""

from __future__ import annotations

from pathlib import Path

from engine.experiments.common import (STORY_PROMPT, greedy, median, prompt_of_length, report, result,
                                       row, salted)

NAME = "quantization"
TITLE = "Quantization: weights and KV cache precision vs quality, memory and speed"
TEXT_PATH = Path(__file__).resolve().parents[2] / "assets" / "quality-text.txt"
VARIANTS = [("fp32", "auto"), ("bf16", "auto"), ("fp16", "auto"), ("int8", "auto"),
            ("int4", "auto"), ("fp32", "bf16"), ("fp32", "fp8"), ("int4", "fp8")]
"""(weights, kv_cache_dtype) pairs, the fp32 reference first."""
BATCH_PROMPTS = ["What is a KV cache?", "Explain prefill and decode in two sentences.",
                 "Write a haiku about memory bandwidth.", "List three ways to make inference faster."]


def label(weights: str, kv: str) -> str:
    """``"int4 weights, fp8 KV"``; the KV part is left out for ``auto``."""
    return f"{weights} weights" + ("" if kv == "auto" else f", {kv} KV")


def quality_text_ids(tokenizer, max_tokens: int | None = None) -> list[int]:
    """Token ids of ``assets/quality-text.txt`` (its first ``max_tokens`` when given)."""
    ids = tokenizer(TEXT_PATH.read_text(encoding="utf-8"))["input_ids"]
    return ids[:max_tokens] if max_tokens else ids


def teacher_forced_logprobs(loaded, ids: list[int], kv_cache_dtype: str = "auto"):
    """Next-token log-probabilities at every position of ``ids``, with keys and values stored
    in ``kv_cache_dtype`` and read back through the paged attention.

    Args:
        loaded: a :class:`engine.model.model_info.LoadedModel` (Llama-family: paged attention).
        ids: ``T`` token ids.
        kv_cache_dtype: ``auto``, ``bf16``, ``fp16`` or ``fp8`` (fp8 scales calibrated first).

    Returns:
        ``[T, V]`` float32 log-probabilities (row ``t`` predicts token ``t + 1``).
    """
    import torch

    from engine.worker.kv_calibration import calibrate_kv_scales
    from engine.worker.kv_pool import KVPool, resolve_kv_dtype
    from engine.worker.paged_attention import PagedContext, SeqSlice, register

    model, spec = loaded.model, loaded.spec
    model.set_attn_implementation(register())
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    t, bs = len(ids), 16
    blocks = -(-t // bs)
    pool = KVPool(spec.layers, spec.kv_heads, spec.head_dim, blocks, bs,
                  resolve_kv_dtype(kv_cache_dtype, dtype), device, compute_dtype=dtype)
    if pool.fp8:
        calibrate_kv_scales(model, loaded.tokenizer, pool)
    ctx = PagedContext(pool=pool, new_slots=torch.arange(t, device=device),
                       prefills=[SeqSlice(0, t, 0, torch.arange(blocks, device=device))],
                       decode_q=None, decode_blocks=None, decode_mask=None)
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids], device=device),
                    position_ids=torch.arange(t, device=device)[None], use_cache=False,
                    paged=ctx, logits_to_keep=0)
    return out.logits[0].float().log_softmax(-1).cpu()


def quality(logprobs, ref_logprobs, ids: list[int]) -> dict:
    """``perplexity``, ``top1_agreement`` and ``kl_mean`` of ``logprobs`` against the fp32
    ``ref_logprobs`` (both ``[T, V]``) on the text ``ids``."""
    import torch

    tgt = torch.tensor(ids[1:])
    nll = -logprobs[:-1].gather(1, tgt[:, None]).mean().item()
    kl = (ref_logprobs.exp() * (ref_logprobs - logprobs)).sum(-1).mean().item()
    top1 = (logprobs.argmax(-1) == ref_logprobs.argmax(-1)).float().mean().item()
    return {"perplexity": float(torch.tensor(nll).exp()), "top1_agreement": top1,
            "kl_mean": max(kl, 0.0)}


def _time_variant(eng, prefill_prompt: str, decode_tokens: int, batch: int, batch_tokens: int) -> dict:
    """One round of the three speed measurements on ``eng``."""
    import time

    out = eng.generate(salted(STORY_PROMPT), greedy(decode_tokens))
    decode = out.metrics.decode_tokens_per_s
    pre = eng.generate(salted(prefill_prompt), greedy(1), raw=True)
    prefill = pre.metrics.prefill_tokens_per_s
    t0 = time.perf_counter()
    handles = [eng.submit(salted(BATCH_PROMPTS[i % len(BATCH_PROMPTS)]), greedy(batch_tokens))
               for i in range(batch)]
    outs = [h.result() for h in handles]
    wall = time.perf_counter() - t0
    bad = [o for o in outs + [out, pre] if not o.finished_ok]
    if bad:
        raise RuntimeError(f"request ended with {bad[0].finish_reason}: {bad[0].error}")
    return {"decode": decode, "prefill": prefill, "batch": batch * batch_tokens / wall}


def run(loaded, quick: bool = False, progress=None, engine=None, variants=None,
        text_tokens: int | None = None, decode_tokens: int | None = None,
        prefill_tokens: int | None = None, batch: int | None = None,
        batch_tokens: int | None = None, repeats: int | None = None) -> dict:
    """Load, score and time every variant.

    Args:
        loaded: the bench's model; its name and device are used (its own weights are reused
            when a variant asks for them).
        quick: 128 text tokens, 8 decode tokens, a 64-token prefill, 4 × 4 batch tokens,
            one round; else the whole text, 64, 512, 16 × 32, three rounds.
        engine: unused (every variant has its own engine, apart from any serving one).
        variants: ``[(weights, kv_cache_dtype), ...]`` instead of :data:`VARIANTS`.
        text_tokens, decode_tokens, prefill_tokens, batch, batch_tokens, repeats: sizes.
    """
    from engine.engine import LLMEngine
    from engine.errors import ModelLoadError
    from engine.model.loader import load_model

    variants = [tuple(v) for v in (variants or VARIANTS)]
    text_tokens = text_tokens or (128 if quick else None)
    decode_tokens = decode_tokens or (8 if quick else 64)
    prefill_tokens = prefill_tokens or (64 if quick else 512)
    batch = batch or (4 if quick else 16)
    batch_tokens = batch_tokens or (4 if quick else 32)
    repeats = repeats or (1 if quick else 3)
    params = {"variants": [list(v) for v in variants], "text_tokens": text_tokens,
              "decode_tokens": decode_tokens, "prefill_tokens": prefill_tokens, "batch": batch,
              "batch_tokens": batch_tokens, "repeats": repeats}
    res = result(NAME, TITLE, quick, params, model=loaded.info.name, device=loaded.info.device)
    ids = quality_text_ids(loaded.tokenizer, text_tokens)
    res["params"]["text_tokens_actual"] = len(ids)
    models, engines, rows = {}, {}, []
    try:
        for i, w in enumerate(dict.fromkeys(v[0] for v in variants)):
            report(progress, 0.25 * i / len(variants), f"loading {w} weights")
            if loaded.info.weights == w:
                models[w] = loaded
                continue
            try:
                models[w] = load_model(loaded.info.name, device=loaded.info.device, weights=w,
                                       progress=None)
            except ModelLoadError as exc:
                res["notes"].append(f"{w} weights skipped: {exc}")
        variants = [v for v in variants if v[0] in models]
        if ("fp32", "auto") not in variants:
            raise RuntimeError("the fp32 reference could not be loaded")
        ref = None
        for i, (w, kv) in enumerate(variants):
            report(progress, 0.25 + 0.25 * i / len(variants), f"scoring {label(w, kv)}")
            lp = teacher_forced_logprobs(models[w], ids, kv)
            if ref is None:
                ref = lp
            lm = models[w]
            # eager decode: a background compile per variant would cost minutes of CPU
            eng = LLMEngine(lm, kv_cache_dtype=kv, telemetry=False, enable_prefix_caching=False,
                            kv_cache_bytes=128 * 2**20, compile="off")
            engines[(w, kv)] = eng
            rows.append({"weights": w, "kv_cache_dtype": kv, "label": label(w, kv),
                         "compute_dtype": lm.info.dtype, **quality(lp, ref, ids),
                         "weights_bytes": lm.info.weights_bytes,
                         # a dense table kept only for the embedding lookup beside a packed copy
                         # of the tied LM head (bf16): stored, but not read by a decode step
                         "lookup_only_bytes": lm.info.weights_bytes - lm.info.weights_read_bytes,
                         "kv_bytes_per_token": eng.pool.bytes_per_token,
                         "kv_bytes_per_token_formula": lm.spec.kv_bytes_per_token(eng.info.kv_dtype_bytes),
                         "kv_dtype": eng.info.kv_dtype, "weights_note": lm.info.weights_note})
        del ref, lp
        prefill_prompt, n_prefill = prompt_of_length(loaded.tokenizer, prefill_tokens, unique=False)
        res["params"]["prefill_tokens_actual"] = n_prefill
        for eng in engines.values():   # warm every engine once before any timing
            eng.generate(salted("Hi"), greedy(2))
        runs = {k: [] for k in engines}
        for r in range(repeats):
            for i, (key, eng) in enumerate(engines.items()):
                report(progress, 0.5 + 0.5 * (r * len(engines) + i) / (repeats * len(engines)),
                       f"timing {label(*key)} ({r + 1}/{repeats})")
                runs[key].append(_time_variant(eng, prefill_prompt, decode_tokens, batch, batch_tokens))
    finally:
        for eng in engines.values():
            eng.shutdown()
    for rw in rows:
        rr = runs[(rw["weights"], rw["kv_cache_dtype"])]
        for k, name in (("decode", "decode_tokens_per_s"), ("prefill", "prefill_tokens_per_s"),
                        ("batch", "batch_tokens_per_s")):
            rw[name] = median([x[k] for x in rr])
            rw[f"{name}_runs"] = [x[k] for x in rr]
    base = rows[0]
    for rw in rows:
        rw["weights_fraction"] = rw["weights_bytes"] / base["weights_bytes"]
        for k in ("decode_tokens_per_s", "prefill_tokens_per_s", "batch_tokens_per_s"):
            rw[f"{k}_vs_fp32"] = rw[k] / base[k] if base[k] else 0.0
    report(progress, 1.0, "done")
    res["rows"] = rows
    for rw in rows:
        res["summary"].append(row(
            f"{rw['label']}: perplexity / top-1 / KL", f"{rw['perplexity']:.3f} / "
            f"{rw['top1_agreement']:.1%} / {rw['kl_mean']:.4f}", "vs fp32"))
        res["summary"].append(row(
            f"{rw['label']}: weights, KV per token", f"{rw['weights_bytes'] / 1e6:.1f} MB "
            f"({rw['weights_fraction']:.0%}), {rw['kv_bytes_per_token']:,} B", ""))
        res["summary"].append(row(
            f"{rw['label']}: decode b1 / prefill {n_prefill} / batch {batch}",
            f"{rw['decode_tokens_per_s']:.1f} ({rw['decode_tokens_per_s_vs_fp32']:.2f}x) / "
            f"{rw['prefill_tokens_per_s']:.0f} ({rw['prefill_tokens_per_s_vs_fp32']:.2f}x) / "
            f"{rw['batch_tokens_per_s']:.0f} ({rw['batch_tokens_per_s_vs_fp32']:.2f}x)", "tok/s"))
    res["notes"].append(
        f"Quality under teacher forcing on assets/quality-text.txt ({len(ids)} tokens) against fp32 "
        "weights with an fp32 KV cache; speeds are medians of "
        f"{repeats} round(s) with the variants taking turns.")
    res["notes"].append(
        "Weights dominate at batch 1 (every step reads them all): fewer bytes per weight is "
        "what speeds decode up. The KV cache grows with every token of every sequence: storing "
        "it in fewer bytes lets more tokens fit in the same pool.")
    return res


def plot(res: dict, path: str) -> str:
    """Three panels: bytes (weights, KV per token), speed vs fp32, quality (top-1, KL)."""
    from engine.experiments.plotting import ENGINE, OTHER, THIRD, figure, save

    rows = res["rows"]
    names = [r["label"].replace(" weights", "").replace(", ", "\n") for r in rows]
    x = list(range(len(rows)))
    fig, (a, b, c) = figure(TITLE, ncols=3, width=5.2, height=4.6)
    a.bar(x, [r["weights_bytes"] / 1e6 for r in rows], color=ENGINE, label="weights (MB)")
    a2 = a.twinx()
    a2.plot(x, [r["kv_bytes_per_token"] for r in rows], "o", color=OTHER, label="KV per token (B)")
    a.set_ylabel("weights, MB")
    a2.set_ylabel("KV cache, bytes per token")
    a.set_title("memory")
    w = 0.27
    for k, (key, col, lab) in enumerate((("decode_tokens_per_s_vs_fp32", ENGINE, "decode b1"),
                                          ("prefill_tokens_per_s_vs_fp32", OTHER, "prefill"),
                                          ("batch_tokens_per_s_vs_fp32", THIRD, "batch"))):
        b.bar([i + (k - 1) * w for i in x], [r[key] for r in rows], w, color=col, label=lab)
    b.axhline(1.0, color="#333333", lw=0.8)
    b.set_ylabel("tokens/s, × fp32")
    b.set_title("speed")
    b.legend(fontsize=7)
    c.bar(x, [r["top1_agreement"] * 100 for r in rows], color=ENGINE, label="top-1 agreement (%)")
    c.set_ylim(80, 100)
    c.set_ylabel("top-1 agreement with fp32, %")
    c2 = c.twinx()
    c2.plot(x, [r["kl_mean"] for r in rows], "o", color=OTHER, label="KL (nats)")
    c2.set_ylabel("mean KL from fp32, nats")
    c.set_title("quality")
    for ax in (a, b, c):
        ax.set_xticks(x)
        ax.set_xticklabels(names, fontsize=7, rotation=45, ha="right")
    return save(fig, path, footnote=f"{res.get('model', '')} on {res.get('device', '')}")
