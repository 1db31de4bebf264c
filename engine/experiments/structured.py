"""Experiment ``structured``: what constrained decoding costs, and what forced tokens save.

- **Mask cost per decode step**: a valid answer to a small schema (a person) and to a large one
  (a 32-property order record, :func:`engine.structured.examples.large_schema`) is tokenized and
  replayed through ``B`` matchers (batch 1 and 16); each step times what the engine does for
  the batch: consume the previous token, fill each row's bitmask, unpack it and mask an
  ``[B, V]`` logits tensor (median over the answer's steps). It is set against the engine's own
  median decode step at the same batch (free text, measured here).
- **Grammar compile time**: cold (a structure the cache has not seen: grammar text, validation
  and the first matcher) and cached (the same structure again), median of repeats; and the
  one-time build of llguidance's tokenizer.
- **Forced tokens**: a greedy answer to an object of five string fields, with jump-forward (the
  grammar's forced tokens appended without a forward pass) and without (forced tokens only
  masked), alternating; forward passes and tokens of each, the share of passes saved, whether
  both give the same tokens.

Result fields beyond the common ones (see :mod:`.common`): ``mask_rows`` (``schema``,
``batch``, ``steps``, ``mask_ms``, ``decode_step_ms``, ``share``), ``decode_step_ms``
(``{"1": ms, "16": ms}``), ``compile`` (``tokenizer_s``, and per schema ``cold_ms``,
``cached_ms``), ``forced`` (``tokens``, ``passes_jump``, ``passes_plain``, ``jumped``,
``passes_saved_share``, ``identical_tokens``, ``wall_ratio``).
"""

from __future__ import annotations

import json
import time

from engine.experiments.common import engine_config, engine_for, median, report, result, row, salted

NAME = "structured"
TITLE = "Structured output: mask cost per step, compile time, forced tokens"


def _replay_ms(compiler, schema: dict, instance, batch: int, vocab: int) -> tuple[float, int]:
    """Median ms per step of the mask work for ``batch`` rows replaying ``instance``."""
    import torch

    from engine.structured.masking import apply_structured_masks
    from engine.structured.params import StructuredOutputsParams
    from engine.structured.state import StructuredState

    text = json.dumps(instance, separators=(",", ":"))
    ids = compiler.hf_tokenizer.encode(text, add_special_tokens=False)
    so = StructuredOutputsParams(json=schema)

    class Row:  # the two fields the masking reads off a sequence
        def __init__(self, k):
            self.seq_id, self.output_ids = f"r{k}", []
            self.structured = StructuredState(compiler.matcher_for(so), "json",
                                              compiler.eos_token_id)

    rows = [Row(k) for k in range(batch)]
    logits = torch.randn(batch, vocab)
    times = []
    for t in range(len(ids) + 1):
        start = time.perf_counter()
        masked = apply_structured_masks(logits, rows, {})
        float(masked[0, 0])  # wait for the work (a no-op on CPU)
        times.append(time.perf_counter() - start)
        if t < len(ids):
            for r in rows:
                r.output_ids.append(ids[t])
    return median(times) * 1e3, len(times)


def _decode_step_ms(eng, batch: int, tokens: int) -> float:
    """Median decode-step duration (ms) of ``batch`` free greedy requests run together."""
    from engine.params import SamplingParams

    p = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    handles = [eng.submit(salted("Tell me about the sea."), p, speculative=False)
               for _ in range(batch)]
    for h in handles:
        h.result()
    steps = {(e.start_s, e.end_s) for h in handles for e in h.events
             if e.phase == "decode" and e.batch_size == batch}
    return median([b - a for a, b in steps]) * 1e3 if steps else float("nan")


def _compile_ms(compiler, schema: dict, repeats: int) -> tuple[float, float]:
    """Median cold and cached ms to get a matcher for ``schema``."""
    from engine.structured.params import StructuredOutputsParams

    cold, cached = [], []
    for i in range(repeats):
        fresh = dict(schema, title=f"run-{i}-{time.perf_counter_ns()}")  # a key never seen
        so = StructuredOutputsParams(json=fresh)
        start = time.perf_counter()
        compiler.matcher_for(so)
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        compiler.matcher_for(StructuredOutputsParams(json=fresh))
        cached.append(time.perf_counter() - start)
    return median(cold) * 1e3, median(cached) * 1e3


def _forced(eng, pairs: int) -> dict:
    """Greedy five-string-field answers with and without jump-forward, alternating."""
    from engine.params import SamplingParams
    from engine.structured.examples import FIVE_STRINGS

    prompt = "Describe a book as JSON with its title, author, genre, city and language."
    params = SamplingParams(temperature=0, max_tokens=120,
                            structured_outputs={"json": FIVE_STRINGS})
    runs = {True: [], False: []}
    part = eng.structured
    try:
        for _ in range(pairs):
            for jump in (True, False):
                part.jump_forward = jump
                h = eng.submit(prompt, params)
                out = h.result()
                passes = len({(e.start_s, e.end_s) for e in h.events})
                runs[jump].append((out, passes, out.metrics.e2e_s))
    finally:
        part.jump_forward = True
    (j_out, j_passes, _), (p_out, p_passes, _) = runs[True][-1], runs[False][-1]
    ratios = [a[2] / b[2] for a, b in zip(runs[True], runs[False]) if b[2] > 0]
    return {"tokens": len(j_out.token_ids), "passes_jump": j_passes, "passes_plain": p_passes,
            "jumped": j_out.structured["jump_forward_tokens"],
            "forced_plain": p_out.structured["forced_tokens"],
            "passes_saved_share": 1 - j_passes / p_passes if p_passes else 0.0,
            "identical_tokens": all(a[0].token_ids == b[0].token_ids
                                    for a, b in zip(runs[True], runs[False])),
            "wall_ratio": median(ratios) if ratios else float("nan"),
            "text": j_out.text}


def run(loaded, quick: bool = False, progress=None, engine=None, repeats: int | None = None,
        tokens: int | None = None) -> dict:
    """Measure the three parts (see the module docstring).

    Args:
        quick: 2 compile repeats, 8-token decode steps and one forced-token pair instead of
            5, 24 and 2.
    """
    from engine.structured.examples import PERSON, SMALL_INSTANCE, large_instance, large_schema

    repeats = repeats or (2 if quick else 5)
    tokens = tokens or (8 if quick else 24)
    with engine_for(loaded, engine) as eng:
        compiler = eng.structured.compiler
        vocab = compiler.vocab_size
        report(progress, 0.05, "building llguidance's tokenizer")
        _ = compiler.ll_tokenizer
        schemas = {"small": (PERSON, SMALL_INSTANCE), "large": (large_schema(), large_instance())}
        comp = {"tokenizer_s": compiler.stats.tokenizer_s}
        for name, (schema, _) in schemas.items():
            report(progress, 0.1, f"compiling the {name} schema")
            cold, cached = _compile_ms(compiler, schema, repeats)
            comp[name] = {"cold_ms": cold, "cached_ms": cached}
        steps = {}
        for k, b in enumerate((1, 16)):
            report(progress, 0.2 + 0.2 * k, f"decode steps at batch {b}")
            steps[str(b)] = _decode_step_ms(eng, b, tokens)
        mask_rows = []
        for name, (schema, inst) in schemas.items():
            for b in (1, 16):
                report(progress, 0.6, f"mask replay: {name} schema, batch {b}")
                ms, n = _replay_ms(compiler, schema, inst, b, vocab)
                mask_rows.append({"schema": name, "batch": b, "steps": n, "mask_ms": ms,
                                  "decode_step_ms": steps[str(b)],
                                  "share": ms / steps[str(b)] if steps[str(b)] else None})
        report(progress, 0.8, "forced tokens: jump-forward on and off")
        forced = _forced(eng, 1 if quick else 2)
        cfg = engine_config(eng)
    report(progress, 1.0, "done")
    res = result(NAME, TITLE, quick, {"repeats": repeats, "tokens": tokens}, mask_rows=mask_rows,
                 decode_step_ms=steps, compile=comp, forced=forced, engine=cfg)
    res["summary"] = [row(f"mask per step, {r['schema']} schema, batch {r['batch']}",
                          r["mask_ms"], f"ms ({100 * (r['share'] or 0):.1f}% of a "
                          f"{r['decode_step_ms']:.1f} ms decode step)") for r in mask_rows]
    res["summary"] += [row("llguidance tokenizer build (once)", comp["tokenizer_s"], "s")]
    for name in schemas:
        res["summary"] += [row(f"compile {name} schema, cold", comp[name]["cold_ms"], "ms"),
                           row(f"compile {name} schema, cached", comp[name]["cached_ms"], "ms")]
    res["summary"] += [
        row("5 string fields: forward passes, jump-forward on / off",
            f"{forced['passes_jump']} / {forced['passes_plain']}", f"for {forced['tokens']} tokens"),
        row("forward passes saved by forced tokens", 100 * forced["passes_saved_share"], "%"),
        row("same tokens with and without jump-forward",
            "yes" if forced["identical_tokens"] else "NO"),
    ]
    res["notes"] = ["Mask cost is measured by replaying a valid answer through the engine's own "
                    "masking function on random logits; the decode step is the engine's median "
                    "for free text at the same batch on this machine."]
    return res


def plot(res: dict, path: str) -> str:
    """Bars: mask ms per step against the decode step, by schema and batch."""
    from engine.experiments.plotting import ENGINE, OTHER, figure, save

    fig, (ax,) = figure(res["title"], height=3.4)
    rows = res["mask_rows"]
    xs = list(range(len(rows)))
    ax.bar([x - 0.2 for x in xs], [r["mask_ms"] for r in rows], width=0.4, color=ENGINE,
           label="mask work per step")
    ax.bar([x + 0.2 for x in xs], [r["decode_step_ms"] for r in rows], width=0.4, color=OTHER,
           label="decode step (free text)")
    ax.set_xticks(xs, [f"{r['schema']}, batch {r['batch']}" for r in rows])
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.legend(fontsize=9, frameon=False)
    f = res["forced"]
    return save(fig, path, f"five string fields: {f['passes_jump']} forward passes with "
                           f"jump-forward vs {f['passes_plain']} without "
                           f"({100 * f['passes_saved_share']:.0f}% saved)")
