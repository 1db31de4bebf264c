"""Small A/B measurements behind the Remedies lesson: each remedy on and off on the page's engine.

Every figure is measured on this engine and this model, a few seconds each on 2 CPU cores:

- :func:`prefix_cache`: time to first token (TTFT, seconds) of a long prompt computed cold,
  then of a second prompt sharing its first tokens (the prefix cache serves their keys and
  values: ``cached_prompt_tokens``), and of a short prompt (shorter prompts).
- :func:`speculative_ab`: decode tokens/s plain and with prompt-lookup speculation on a prompt
  whose answer copies it (``engine.experiments.speculative``).
- :func:`kv_pools`: bytes per token slot of KV pools allocated for this model in its own dtype
  and in fp8, and with as many KV heads as query heads (what the model would store without
  grouped-query attention): ``pool.nbytes / token slots``, measured from the tensors.
- :func:`weights`: the weights' bytes as stored in fp32 and in int4, from the loader's
  accounting (``ModelInfo.weights_bytes``: every parameter and buffer's storage, once); the
  variant the engine does not serve is loaded for a moment and dropped.
- :func:`block_sharing`: one request with ``n`` samples against ``n`` requests of the same
  prompt at once: distinct KV blocks their block tables hold at the end (paging shares the
  prompt's blocks between the samples).
- :func:`chunked_prefill`: chunked prefill on and off on two small private engines alike but
  for chunking: a running answer's gaps between tokens while a long prompt arrives, and that
  prompt's time to first token, prefilled in chunks of this engine's cap
  (``long_prefill_token_threshold``) against in one step (the sides take turns, two rounds).
- :func:`sampling_examples`: one prompt greedy twice and sampled twice with two seeds.

:func:`measure` runs them all and never raises for one part: a failed part has ``error``.
The batching figures are not measured here: the page prints the Batch size lesson's sweep
(``engine.experiments.batch``), its one batching curve.
Timed prompts are salted (:func:`engine.experiments.common.salted`) so no earlier request's
cached blocks serve them, except where the prefix cache is what is measured.
"""

from __future__ import annotations

import os
import time

from engine.experiments.common import median, prompt_of_length, report, salted

NAME = "remedies"
PARTS = ("prefix_cache", "chunked_prefill", "speculative", "kv_pools", "weights", "block_sharing", "sampling")
"""The measurements of :func:`measure`, in run order."""
PREFIX_TOKENS = 384
SHORT_TOKENS = 48
QUESTIONS = ("\n\nQuestion: what did the keeper count each evening?\nAnswer:",
             "\n\nQuestion: who waved from the small boat?\nAnswer:")
MAX_LOAD_PARAMS = 2 * 10**9  # a second copy of a larger model is not loaded for a comparison


def _generate(engine, prompt: str, max_tokens: int, **kwargs):
    """One greedy request (EOS ignored) through ``engine``'s queue; RuntimeError unless it
    finished normally."""
    from engine.experiments.common import greedy

    out = engine.submit(prompt, greedy(max_tokens), **kwargs).result()
    if not out.finished_ok:
        raise RuntimeError(f"engine request ended with {out.finish_reason}: {out.error}")
    return out


def prefix_cache(engine, prefix_tokens: int = PREFIX_TOKENS, short_tokens: int = SHORT_TOKENS,
                 rounds: int = 2) -> dict:
    """TTFT of a cold long prompt, of a second one sharing its first ``prefix_tokens`` tokens,
    and of a cold short prompt, ``rounds`` times (medians).

    Returns:
        ``cold_ttft_s``, ``warm_ttft_s``, ``short_ttft_s`` (seconds), ``prompt_tokens`` and
        ``short_prompt_tokens`` (tokens), ``cached_tokens`` (prompt tokens of the warm request
        served by the prefix cache; whole 16-token blocks), ``cold_cached_tokens`` (0 unless
        the cache is shared with something else), ``prefix_caching`` (the engine's setting),
        ``runs`` (each round's three TTFTs).
    """
    tok = engine.experiment_model().tokenizer
    _generate(engine, salted("Hi."), 1, raw=True)  # warm-up: the first step after idle is slower
    runs = []
    for _ in range(rounds):
        doc, _n = prompt_of_length(tok, prefix_tokens, unique=True)
        cold = _generate(engine, doc + QUESTIONS[0], 1, raw=True)
        warm = _generate(engine, doc + QUESTIONS[1], 1, raw=True)
        short_text, _m = prompt_of_length(tok, short_tokens, unique=True)
        short = _generate(engine, short_text + QUESTIONS[0], 1, raw=True)
        runs.append({"cold_ttft_s": cold.metrics.ttft_s, "warm_ttft_s": warm.metrics.ttft_s,
                     "short_ttft_s": short.metrics.ttft_s, "prompt_tokens": cold.metrics.prompt_tokens,
                     "short_prompt_tokens": short.metrics.prompt_tokens,
                     "cached_tokens": warm.metrics.cached_prompt_tokens,
                     "cold_cached_tokens": cold.metrics.cached_prompt_tokens})
    out = {k: median(r[k] for r in runs) for k in ("cold_ttft_s", "warm_ttft_s", "short_ttft_s")}
    for k in ("prompt_tokens", "short_prompt_tokens", "cached_tokens", "cold_cached_tokens"):
        out[k] = int(min(r[k] for r in runs))
    out["prefix_caching"] = bool(getattr(engine.config, "enable_prefix_caching", False)) and bool(
        getattr(engine, "paged", False))
    out["runs"] = runs
    return out


def speculative_ab(engine, new_tokens: int = 24) -> dict:
    """The ``speculative`` experiment on its copy-heavy prompt alone, one warm-up and one
    measured pair.

    Returns:
        ``plain_tokens_per_s``, ``spec_tokens_per_s`` (decode tokens/s), ``ratio``,
        ``acceptance_rate``, ``identical_tokens``, ``new_tokens``.
    """
    from engine.experiments import speculative

    res = speculative.run(engine.experiment_model(), quick=True, engine=engine, new_tokens=new_tokens,
                          pairs=1, prompts={"copy-heavy": speculative.PROMPTS["copy-heavy"]})
    r = res["rows"][0]
    return {"plain_tokens_per_s": r["plain_tok_s"][0], "spec_tokens_per_s": r["spec_tok_s"][0],
            "ratio": r["ratio_median"], "acceptance_rate": r["acceptance_rate"],
            "identical_tokens": r["identical_tokens"], "new_tokens": new_tokens}


def _pool_bytes_per_token(spec, kv_heads: int, option: str, dtype) -> tuple[int, str]:
    """Bytes per token slot of a one-block pool (16 slots) for ``spec`` with ``kv_heads``."""
    from engine.worker.kv_pool import KVPool, kv_dtype_name, resolve_kv_dtype

    store = resolve_kv_dtype(option, dtype)
    pool = KVPool(spec.layers, kv_heads, spec.head_dim, 1, 16, store, "cpu", compute_dtype=dtype)
    return pool.nbytes // 16, kv_dtype_name(store)


def kv_pools(engine) -> dict:
    """KV bytes per token of pools allocated for this model: as the engine stores it, in fp8,
    and with ``heads`` KV heads instead of ``kv_heads`` (no GQA), in the engine's dtype.

    Returns:
        ``engine_bytes_per_token`` and ``engine_dtype`` (the serving pool's, when paged, else a
        pool in the model's dtype), ``fp8_bytes_per_token``, ``mha_bytes_per_token``, ``heads``,
        ``kv_heads``, ``pool_tokens`` (token slots of the serving pool, 0 without one),
        ``pool_bytes`` (its bytes).
    """
    import torch

    loaded = engine.experiment_model()
    spec = loaded.spec
    dtype = next(loaded.model.parameters()).dtype
    pool = getattr(engine, "pool", None)
    if pool is not None:
        slots = pool.num_blocks * pool.block_size
        here, name = pool.nbytes // slots, str(pool.dtype).replace("torch.", "")
        store = pool.dtype
    else:
        here, name = _pool_bytes_per_token(spec, spec.kv_heads, "auto", dtype)
        slots, store = 0, dtype
    fp8, _ = _pool_bytes_per_token(spec, spec.kv_heads, "fp8", dtype)
    mha = _pool_bytes_per_token(spec, spec.heads, "auto", store if store != torch.float8_e4m3fn else dtype)[0]
    return {"engine_bytes_per_token": int(here), "engine_dtype": name, "fp8_bytes_per_token": int(fp8),
            "mha_bytes_per_token": int(mha), "heads": spec.heads, "kv_heads": spec.kv_heads,
            "pool_tokens": int(slots), "pool_bytes": int(pool.nbytes) if pool is not None else 0}


def weights(engine, variants: tuple[str, ...] = ("fp32", "int4")) -> dict:
    """Bytes of the weights stored as each of ``variants`` (the loader's measured accounting);
    a variant the engine does not serve is loaded on the engine's device and dropped.

    Returns:
        ``rows``: per variant ``weights``, ``weights_bytes`` (bytes), ``served`` (the engine's
        own); ``params`` (parameters); ``skipped`` (why a variant was not loaded, or empty).
    """
    import gc

    from engine.model.loader import load_model

    loaded = engine.experiment_model()
    info = loaded.info
    rows, skipped = [], ""
    for w in variants:
        if info.weights == w:
            rows.append({"weights": w, "weights_bytes": int(info.weights_bytes), "served": True})
            continue
        if info.num_params > MAX_LOAD_PARAMS:
            skipped = f"{w} not loaded: a second copy of {info.num_params / 1e9:.1f} B parameters"
            continue
        other = load_model(info.name, device=info.device, weights=w, progress=None)
        rows.append({"weights": w, "weights_bytes": int(other.info.weights_bytes), "served": False})
        del other
        gc.collect()
    return {"rows": rows, "params": int(info.num_params), "skipped": skipped}


def _distinct_blocks(handles) -> tuple[int, int]:
    """``(distinct, held)``: physical KV blocks in the last block table of every sequence of
    ``handles`` (each counted once), and their sum over the sequences."""
    last: dict[tuple[int, int], list[int]] = {}
    for i, h in enumerate(handles):
        for e in h.events:
            if e.block_table:
                last[(i, e.index)] = list(e.block_table)
    ids = set()
    for table in last.values():
        ids.update(table)
    return len(ids), sum(len(t) for t in last.values())


def block_sharing(engine, n: int = 4, prompt_tokens: int = 128, new_tokens: int = 8) -> dict:
    """One request with ``n`` samples against ``n`` requests of the same prompt, submitted at
    once (sampling at temperature 1, seeded); each of the ``n`` requests has its own cache salt,
    so none reuses another's prompt blocks through the prefix cache.

    Returns:
        ``grouped_blocks`` and ``independent_blocks`` (distinct KV blocks held at the end),
        ``logical_blocks`` (blocks the ``n`` sequences would hold each on its own),
        ``prompt_tokens``, ``n``, ``block_size``.
    """
    from engine.params import SamplingParams

    tok = engine.experiment_model().tokenizer
    sides = {}
    for side in ("grouped", "independent"):
        text, m = prompt_of_length(tok, prompt_tokens, unique=True)
        if side == "grouped":
            handles = [engine.submit(text, SamplingParams(temperature=1.0, max_tokens=new_tokens,
                                                          ignore_eos=True, seed=7, n=n), raw=True)]
        else:
            # each its own cache salt: the prefix cache cannot share the prompt's blocks either
            own = os.urandom(3).hex()
            handles = [engine.submit(text, SamplingParams(temperature=1.0, max_tokens=new_tokens,
                                                          ignore_eos=True, seed=7 + k), raw=True,
                                     cache_salt=f"remedies-own-{own}-{k}") for k in range(n)]
        outs = [h.result() for h in handles]
        bad = [o for o in outs if not o.finished_ok]
        if bad:
            raise RuntimeError(f"engine request ended with {bad[0].finish_reason}: {bad[0].error}")
        sides[side] = _distinct_blocks(handles)
    return {"grouped_blocks": sides["grouped"][0], "independent_blocks": sides["independent"][0],
            "logical_blocks": sides["grouped"][1], "prompt_tokens": m, "n": n,
            "block_size": int(getattr(engine.config, "block_size", 16))}


def chunked_prefill(engine, long_tokens: int = 512, new_tokens: int = 12, before: int = 3,
                    rounds: int = 2) -> dict:
    """Chunked prefill on and off: the same run on two small private engines over this engine's
    model, alike but for chunking. A short answer decodes; after its ``before``-th token a
    ``long_tokens`` prompt arrives. ``chunked`` prefills it in chunks of this engine's cap
    (:func:`_chunk_tokens`) within this engine's step budget; ``whole`` has a step budget that
    holds the whole prompt and no cap, so the prompt is prefilled in one step. The sides take
    turns for ``rounds`` rounds and each keeps its least disturbed round (the shortest longest
    gap), so a burst of load on a shared machine does not land on one side only.

    Returns:
        ``chunked`` and ``whole``, each :func:`_chunk_side`'s figures (seconds, tokens) of its
        kept round; ``long_prompt_tokens``, ``chunk_tokens`` (the chunked side's cap, tokens),
        ``answer_tokens``, ``rounds``.

    Raises:
        RuntimeError: a request that ended with an error.
    """
    from engine.experiments.common import private_engine

    loaded = engine.experiment_model()
    chunk = _chunk_tokens(engine.config)
    budget = int(engine.config.max_num_batched_tokens)
    kv = 64 * 2**20  # about 1,400 tokens of the embedded model in fp32: both requests fit
    options = {"chunked": dict(max_num_batched_tokens=budget, long_prefill_token_threshold=chunk),
               "whole": dict(max_num_batched_tokens=max(budget, long_tokens + 64),
                             long_prefill_token_threshold=0)}
    engines: dict = {}
    runs: dict = {side: [] for side in options}
    try:
        for side, opts in options.items():
            engines[side] = private_engine(loaded, kv_cache_bytes=kv, **opts)
            _generate(engines[side], salted("Hi."), 2, raw=True)  # warm-up: a first step is slower
        for _ in range(rounds):
            for side, eng in engines.items():
                runs[side].append(_chunk_side(eng, long_tokens, new_tokens, before))
    finally:
        for eng in engines.values():
            eng.shutdown()
    out: dict = {side: min(r, key=lambda x: x["max_gap_s"]) for side, r in runs.items()}
    out.update(long_prompt_tokens=out["chunked"]["long_prompt_tokens"], chunk_tokens=chunk,
               answer_tokens=out["chunked"]["answer_tokens"], rounds=rounds)
    return out


def _chunk_side(engine, long_tokens: int, new_tokens: int, before: int) -> dict:
    """One side of :func:`chunked_prefill` on ``engine``.

    Returns:
        ``ttft_s`` (the long prompt's time to first token: arrival to first token, seconds),
        ``long_prefill_s`` (its first token − scheduled), ``max_gap_s`` and ``median_gap_s``
        (the running answer's longest and median gap between two tokens), ``gaps_s`` (every
        gap, in order), ``tokens_during`` (answer tokens produced while the long prompt was
        prefilled: steps it shared with the prefill), ``long_prompt_tokens``, ``answer_tokens``.
    """
    from engine.params import SamplingParams

    tok = engine.experiment_model().tokenizer
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    stream = engine.submit(salted("Count slowly from one to fifty, one number per line."), params)
    seen = 0
    for _ in stream:
        seen += 1
        if seen >= before:
            break
    text, _n = prompt_of_length(tok, long_tokens, unique=True)
    long = engine.submit(text, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True), raw=True)
    a, b = stream.result(), long.result()
    for out in (a, b):
        if not out.finished_ok:
            raise RuntimeError(f"engine request ended with {out.finish_reason}: {out.error}")
    prefill = next(e for e in long.events if e.phase == "prefill")
    during = [e for e in stream.events if e.phase == "decode"
              and e.start_s >= prefill.start_s - 1e-6 and e.end_s <= prefill.end_s + 1e-6]
    gaps = list(a.metrics.itl_s)
    return {"ttft_s": b.metrics.ttft_s, "long_prefill_s": b.metrics.prefill_time_s,
            "max_gap_s": max(gaps) if gaps else 0.0, "median_gap_s": median(gaps), "gaps_s": gaps,
            "tokens_during": len(during), "long_prompt_tokens": b.metrics.prompt_tokens,
            "answer_tokens": a.metrics.output_tokens}


def _chunk_tokens(config) -> int:
    """Most tokens of one prompt a step of an engine with ``config`` prefills."""
    from engine.config import prefill_chunk_cap

    return int(prefill_chunk_cap(config) or config.max_num_batched_tokens)


SAMPLING_PROMPT = "Give a name for a small grey cat."


def sampling_examples(engine, prompt: str = SAMPLING_PROMPT, new_tokens: int = 40,
                      temperature: float = 1.0, seeds: tuple[int, ...] = (1, 2, 1)) -> dict:
    """``prompt`` greedy twice, then sampled at ``temperature`` with each of ``seeds`` (a seed
    given twice shows that a fixed seed repeats its answer); ``new_tokens`` at most, enough for
    a sentence or two (an answer cut there is marked as cut).

    Returns:
        ``prompt``, ``greedy`` (the two texts), ``greedy_cut`` (for each, whether it stopped at
        ``new_tokens`` rather than ending), ``sampled`` (``[{"seed", "text", "cut"}]``),
        ``greedy_equal`` (the greedy texts are the same), ``temperature``, ``new_tokens``.

    Raises:
        RuntimeError: a request that ended with an error.
    """
    from engine.params import SamplingParams

    def answer(params) -> tuple[str, bool]:
        out = engine.submit(prompt, params).result()
        if not out.finished_ok:
            raise RuntimeError(f"engine request ended with {out.finish_reason}: {out.error}")
        return out.text, str(out.finish_reason) == "length"

    greedy = [answer(SamplingParams(temperature=0, max_tokens=new_tokens, repetition_penalty=1.0))
              for _ in range(2)]
    sampled = []
    for s in seeds:
        text, cut = answer(SamplingParams(temperature=temperature, top_k=0, top_p=1.0,
                                          max_tokens=new_tokens, seed=s))
        sampled.append({"seed": s, "text": text, "cut": cut})
    return {"prompt": prompt, "greedy": [t for t, _ in greedy], "greedy_cut": [c for _, c in greedy],
            "sampled": sampled, "greedy_equal": greedy[0][0] == greedy[1][0],
            "temperature": temperature, "new_tokens": new_tokens}


FUNCTIONS = {"prefix_cache": prefix_cache, "chunked_prefill": chunked_prefill, "sampling": sampling_examples, "speculative": speculative_ab,
             "kv_pools": kv_pools, "weights": weights, "block_sharing": block_sharing}


def measure(engine, parts: tuple[str, ...] = PARTS, progress=None) -> dict:
    """Run the measurements of ``parts`` on ``engine`` (a lesson-labelled engine from the page).

    Returns:
        ``{part: result}`` for each part, a failed one as ``{"error": message}``, plus
        ``elapsed_s`` (wall seconds per part) and ``measured_at`` (``time.time()``).

    Raises:
        ValueError: an unknown part name.
    """
    unknown = [p for p in parts if p not in FUNCTIONS]
    if unknown:
        raise ValueError(f"parts must be among {', '.join(PARTS)}, got {', '.join(unknown)}")
    out: dict = {"elapsed_s": {}}
    paged = bool(getattr(engine, "paged", False))
    for i, part in enumerate(parts):
        report(progress, i / len(parts), f"measuring {part.replace('_', ' ')}")
        t0 = time.perf_counter()
        if part in ("speculative", "block_sharing", "chunked_prefill") and not paged:
            out[part] = {"error": "needs the paged KV cache (this engine serves one request at a time)"}
            continue
        try:
            out[part] = FUNCTIONS[part](engine)
        except Exception as exc:  # noqa: BLE001 - one failed part must not hide the others
            out[part] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
        out["elapsed_s"][part] = time.perf_counter() - t0
    report(progress, 1.0, "done")
    out["measured_at"] = time.time()
    return out
