"""Lesson: remedies. The five thinking questions with the lesson that answers each, then for each
bottleneck (high TTFT, high TPOT, KV cache near full, weights that don't fit, throughput flat with
batch) its remedies: what each does, where on the page it is shown (a lesson tab or a Playground
control, one or two clicks away) and the figure it moved on this engine.

The figures are measured by ``engine.experiments.remedies`` through the page's engine as lesson
requests (:class:`app.tabs.lessons.runs.LessonEngine`), or quoted from a related lesson's last run
(:mod:`app.tabs.lessons.last_runs`); the one remedy this model cannot show (a sliding window) is
computed from a listed model's config and says so. Every printed equation's product is the
printed result. No torch here.
"""

from __future__ import annotations

import dataclasses
import html
import time

import gradio as gr

from engine.experiments import remedies as measurements
from engine.telemetry.estimator import load_spec

from app.render.fmt import fmt_bytes, fmt_int, fmt_rate
from app.tabs.lessons import (batch, calculator, machine_profile, prefill, quantization,
                              remedies_chunked, roofline, sampling, speculative)
from app.tabs.lessons.common import error_html, progress_adapter
from app.tabs.lessons.remedy_links import figure_link

TITLE = "Remedies"
TEXT = (
    "Each bottleneck below has its remedies: what each one does, **where on this page you can see "
    "it** (a lesson tab above, or a Playground control) and **the figure it moved on this engine**. "
    "Press **Measure** to run small on/off experiments through the page's engine (a minute or two "
    "on 2 CPU cores); figures from a related lesson's last run appear on their own, within "
    "seconds of its end. The batching figures are the **Batch size** lesson's sweep, the one batching "
    "curve of this server (Measure runs it when none is younger than "
    f"{machine_profile.MAX_AGE_S // 60:.0f} minutes), so the two tabs "
    "print the same numbers.")
NOT_YET = "<i>press Measure</i>"
REFRESH_S = 10.0
"""Seconds between a page's checks for a lesson run or a Measure finished since it drew."""
SLIDING_MODEL = "mistralai/Mistral-7B-v0.1"
SLIDING_TOKENS = 32768


def lesson(module) -> str:
    """``"Lessons › **<its tab title>**"``: one click on this tab bar."""
    return f"Lessons › **{module.TITLE}**"


QUESTIONS = (
    ("Q1", "Why is decode memory-bound, and when does it become compute-bound?",
     "worked out for a 7B model on an H100 below this table; "
     f"{lesson(roofline)}: the same for any model; "
     f"{lesson(prefill)}: the decode share"),
    ("Q2", "TTFT is high and TPOT low: what do you optimise first, and how?",
     f"{lesson(prefill)}: TTFT is prefill plus queueing; below: **High TTFT**"),
    ("Q3", "The KV cache is at 80%: name three ways to relieve it.",
     f"{lesson(calculator)} (KV dtype, batch, context, block sharing); {lesson(quantization)}; "
     "below: **KV cache near full**"),
    ("Q4", "Greedy or sampling? Give examples.",
     f"{lesson(sampling)}; Playground › sidebar **temperature** (0 = greedy) with a fixed **seed**; "
     "the Playground's chat keeps its history, so press **Clear** before asking the same question "
     "the other way (or the second answer also reads the first); examples measured below, each a "
     "fresh request"),
    ("Q5", "An experiment: latency and throughput against batch size.",
     f"{lesson(batch)}: 1 to 16 sequences at once; below: **Throughput flat with batch**"),
)


Q1_MODEL = "meta-llama/Llama-2-7b-hf"
"""The model whose H100 crossing answers Q1 on this tab itself (the roofline lesson computes it
for any model)."""


def q1_answer(context: int = 512) -> str:
    """Q1 in short, worked out by the roofline lesson's own formula for :data:`Q1_MODEL` in fp16
    (:func:`app.tabs.lessons.roofline.crossing_text`): a decode step reads every weight once and
    does about 2 FLOPs per weight per sequence, so its intensity grows with the batch."""
    from app.tabs.lessons import roofline_models as rm
    from engine.telemetry.estimator import load_spec

    shape = rm.spec_shape(load_spec(Q1_MODEL), "fp16", "fp16")
    return ("**Q1 in short:** a decode step reads every weight once and does about 2 FLOPs per "
            "weight for each sequence in the batch, so at batch 1 it does about 1 FLOP per byte "
            "of fp16 weights, far below any ridge: memory-bound. "
            + roofline.crossing_text(shape, context, Q1_MODEL))


def questions_markdown() -> str:
    """The thinking questions as a table: question and the lesson that answers it; then Q1's
    answer for a 7B model on an H100 (:func:`q1_answer`)."""
    lines = ["| thinking question | where the answer is |", "| --- | --- |"]
    lines += [f"| **{q}** {text} | {where} |" for q, text, where in QUESTIONS]
    return "\n".join(lines) + "\n\n" + q1_answer()


def _ms(seconds: float) -> int:
    """Seconds as whole milliseconds (what the cells print)."""
    return int(round(seconds * 1000))


def _times(a: float, b: float) -> str:
    """``a ÷ b`` of two printed numbers, e.g. ``"7.8×"``."""
    return f"{a / b:.1f}×" if b else "–"


def _part(m: dict | None, key: str):
    """``(result, None)``, or ``(None, cell text)`` when not measured yet or failed."""
    if not m:
        return None, NOT_YET
    r = m.get(key)
    if r is None:
        return None, NOT_YET
    if "error" in r:
        return None, f"<span style='color:#b00'>not measured: {html.escape(r['error'])}</span>"
    return r, None


def _ago(at: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(at))


# ---- the cells: one function per remedy, (measurements, facts) -> the figure's text ----------

def cell_prefix(m, facts) -> str:
    r, why = _part(m, "prefix_cache")
    if why:
        return why
    cold, warm = _ms(r["cold_ttft_s"]), _ms(r["warm_ttft_s"])
    if not r["prefix_caching"]:
        return (f"prefix caching is off on this engine: TTFT {cold:,} ms for a {fmt_int(r['prompt_tokens'])}-token "
                f"prompt, {warm:,} ms for a second one starting the same way")
    return (f"TTFT **{cold:,} ms → {warm:,} ms** ({cold:,} ÷ {warm:,} = {_times(cold, warm)}) for a "
            f"{fmt_int(r['prompt_tokens'])}-token prompt whose first {fmt_int(r['cached_tokens'])} tokens "
            "came from the cache")


def cell_chunked(m, facts) -> str:
    r, why = _part(m, "chunked_prefill")
    return why or remedies_chunked.cell(r)


def cell_short(m, facts) -> str:
    r, why = _part(m, "prefix_cache")
    if why:
        return why
    long, short = _ms(r["cold_ttft_s"]), _ms(r["short_ttft_s"])
    return (f"TTFT **{long:,} ms** at {fmt_int(r['prompt_tokens'])} prompt tokens, **{short:,} ms** at "
            f"{fmt_int(r['short_prompt_tokens'])} ({long:,} ÷ {short:,} = {_times(long, short)})")


def _rows(facts: dict):
    """``((batch-1 row, batch-8 row, sweep), None)`` from the server's batch sweep
    (``facts["batch_run"]``, the Batch size lesson's, whoever ran it), or ``(None, cell text)``
    before one ran."""
    run = (facts or {}).get("batch_run")
    rows = {r["batch"]: r for r in (run or {}).get("rows", [])}
    if not run or 1 not in rows or SWEEP_BATCH not in rows:
        return None, NOT_YET
    return (rows[1], rows[SWEEP_BATCH], run), None


SWEEP_BATCH = 8
"""The batch whose figures the remedies set against batch 1 (a size of the Batch size sweep)."""


def sweep_source(run: dict) -> str:
    """``"from the Batch size sweep at 12:04 UTC: 24 new tokens, medians of 3 rounds"``: where
    the batching figures come from, so the two panels that print them visibly print one run."""
    at = time.strftime("%H:%M UTC", time.gmtime(run["at"]))
    return (f"from the **{batch.TITLE}** sweep at {at}: {run['new_tokens']} new tokens, medians of "
            f"{run.get('rounds', 1)} rounds")


def cell_scheduling(m, facts) -> str:
    rows, why = _rows(facts)
    if why:
        return why
    one, many, run = rows
    if "ttft_s" not in one:
        return NOT_YET
    return (f"TTFT **{_ms(one['ttft_s']):,} ms** alone, **{_ms(many['ttft_s']):,} ms** (median) when "
            f"{many['batch']} requests arrive at once: each step takes at most "
            f"{fmt_int(facts.get('max_num_batched_tokens', 0))} tokens, so later prompts wait their turn "
            f"({sweep_source(run)})")


def cell_smaller_batch_tpot(m, facts) -> str:
    rows, why = _rows(facts)
    if why:
        return why
    one, many, run = rows
    a, b = one["per_token_latency_ms"], many["per_token_latency_ms"]
    return f"TPOT **{a:.0f} ms** at batch 1, **{b:.0f} ms** at batch {many['batch']} ({sweep_source(run)})"


def cell_batching(m, facts) -> str:
    rows, why = _rows(facts)
    if why:
        return why
    one, many, run = rows
    # as the Batch size lesson prints them (fmt_rate: one decimal below 100 tok/s, none above)
    a, b = batch.shown_rate(one["throughput_tokens_per_s"]), batch.shown_rate(many["throughput_tokens_per_s"])
    sa, sb = fmt_rate(a, "").strip(), fmt_rate(b, "").strip()
    verdict = ("it grew: the decode step is memory-bound, so sequences share its weight reads" if b / a >= 2 else
               "under 2× for 8× the sequences counts as flat. The decode step itself is memory-bound "
               "by its intensity (the Prefill and decode and Memory-bound lessons), but this figure "
               "counts every sequence's prefill too, which is compute-bound on this CPU and grows "
               "with the batch, and each step also pays Python and small operators (the Memory-bound "
               "lesson's third regime); or the machine was busy (measure again)")
    knee = (f"knee at batch {run['knee']}" if run.get("knee") else "no knee up to batch 16")
    return (f"throughput **{sa} → {sb} tok/s** from batch 1 to {many['batch']} "
            f"({sb} ÷ {sa} = {_times(b, a)}; {many['batch']}× if sequences were free), "
            f"{run['new_tokens']} new tokens each, prefill included, {knee} ({sweep_source(run)}); {verdict}")


def cell_speculative(m, facts) -> str:
    r, why = _part(m, "speculative")
    if why:
        return why
    a, b = round(r["plain_tokens_per_s"], 1), round(r["spec_tokens_per_s"], 1)
    return (f"decode **{a:.1f} → {b:.1f} tok/s** ({b:.1f} ÷ {a:.1f} = {_times(b, a)}) on a prompt whose "
            f"answer copies it; {r['acceptance_rate']:.0%} of drafts accepted; same greedy tokens: "
            f"{'yes' if r['identical_tokens'] else 'no'}")


def cell_compiled(m, facts) -> str:
    run, status = facts.get("compile_run"), facts.get("compile") or {}
    if status.get("status", "off") == "off":
        state = "this engine's decode step now: **eager** (compiling is off on this server)"
    else:
        ready = ", ".join(str(b) for b in status.get("ready", [])) or "none yet"
        state = (f"this engine's decode step {'now' if m else 'when the page loaded'}: "
                 f"**{status.get('path', 'eager')}** ({status['status']}; batch "
                 f"buckets compiled: {ready}; {fmt_int(status.get('steps_compiled', 0))} compiled and "
                 f"{fmt_int(status.get('steps_eager', 0))} eager decode steps so far)")
    if not run:
        return state + f"; for the speed, press “Time eager against compiled” in {lesson(roofline)} (about a minute)"
    a, b = round(run["eager_tokens_per_s"], 1), round(run["compiled_tokens_per_s"], 1)
    return (f"batch-{run['batch']} decode **{a:.1f} → {b:.1f} tok/s** eager → compiled ({b:.1f} ÷ {a:.1f} = "
            f"{_times(b, a)}; that lesson's last run, {_ago(run['at'])}); {state}")


def _weights(m):
    r, why = _part(m, "weights")
    if why:
        return None, why
    by = {row["weights"]: row["weights_bytes"] for row in r["rows"]}
    if "fp32" not in by or "int4" not in by:
        return None, f"not measured: {html.escape(r.get('skipped') or 'a variant was not loaded')}"
    return by, None


def cell_quant_step(m, facts) -> str:
    by, why = _weights(m)
    extra = ""
    run = facts.get("quant_run")
    if run and "fp32 weights" in run and "int4 weights" in run:
        a = round(run["fp32 weights"]["decode_tokens_per_s"], 1)
        b = round(run["int4 weights"]["decode_tokens_per_s"], 1)
        extra = (f"; batch-1 decode {a:.1f} → {b:.1f} tok/s fp32 → int4 ({lesson(quantization)}'s last run, "
                 f"{_ago(run['at'])})")
    if why:
        return (why + extra) if extra else why
    return (f"bytes read per decode step **{fmt_bytes(by['fp32'])} → {fmt_bytes(by['int4'])}** fp32 → int4 "
            f"({fmt_int(by['fp32'])} ÷ {fmt_int(by['int4'])} = {by['fp32'] / by['int4']:.2f}×){extra}")


def cell_quant_fit(m, facts) -> str:
    by, why = _weights(m)
    if why:
        return why
    big = fit_large_model()
    return (f"weights stored **{fmt_int(by['fp32'])} B in fp32, {fmt_int(by['int4'])} B in int4** "
            f"({fmt_bytes(by['fp32'])} → {fmt_bytes(by['int4'])}), both loaded and counted by the engine. "
            f"Computed for {big['model']} at {fmt_int(big['seq_len'])} tokens: {fmt_bytes(big['fp16'])} in fp16 "
            f"({'fits' if big['fp16_fits'] else 'does not fit'} a {big['gpu']}), {fmt_bytes(big['int4'])} with int4 "
            f"weights ({'fits' if big['int4_fits'] else 'does not fit'})")


def fit_large_model(model: str = "meta-llama/Meta-Llama-3-8B", seq_len: int = 4096) -> dict:
    """Total memory of ``model`` at batch 1 and ``seq_len`` tokens (weights, fp16 KV cache,
    activations; :func:`engine.experiments.calculator.calculate`) with fp16 and with int4
    weights, and whether each fits the calculator's first GPU.

    Returns:
        ``model`` (its short name), ``seq_len``, ``gpu``, ``fp16`` and ``int4`` (bytes),
        ``fp16_fits`` and ``int4_fits``.
    """
    from engine.experiments import calculator as calc

    a = calc.calculate(model, seq_len, 1, "fp16", weights="fp16", kv_dtype="fp16")
    b = calc.calculate(model, seq_len, 1, "fp16", weights="int4", kv_dtype="fp16")
    return {"model": model.split("/")[-1], "seq_len": seq_len, "gpu": a["gpus"][0]["name"],
            "fp16": a["total_bytes"], "int4": b["total_bytes"], "fp16_fits": a["gpus"][0]["fits"],
            "int4_fits": b["gpus"][0]["fits"]}


def _pools(m):
    return _part(m, "kv_pools")


def cell_gqa(m, facts) -> str:
    r, why = _pools(m)
    if why:
        return why
    a, b = r["mha_bytes_per_token"], r["engine_bytes_per_token"]
    return (f"{r['kv_heads']} KV heads for {r['heads']} query heads: **{fmt_int(b)} B per token**; a pool "
            f"with one KV head per query head stores **{fmt_int(a)} B** ({fmt_int(a)} ÷ {fmt_int(b)} = "
            f"{a / b:.1f}×), both allocated and measured")


def cell_fp8(m, facts) -> str:
    r, why = _pools(m)
    if why:
        return why
    a, b = r["engine_bytes_per_token"], r["fp8_bytes_per_token"]
    text = (f"**{fmt_int(a)} → {fmt_int(b)} B per token** ({r['engine_dtype']} → fp8, measured pools; "
            f"{fmt_int(a)} ÷ {fmt_int(b)} = {a / b:.1f}×)")
    if r["pool_bytes"]:
        text += (f": this engine's {fmt_bytes(r['pool_bytes'])} pool holds {fmt_int(r['pool_tokens'])} tokens now; "
                 f"in fp8 {fmt_int(r['pool_bytes'])} B ÷ {fmt_int(b)} B = {fmt_int(r['pool_bytes'] // b)} tokens")
    return text


def cell_sharing(m, facts) -> str:
    r, why = _part(m, "block_sharing")
    if why:
        return why
    g, i = r["grouped_blocks"], r["independent_blocks"]
    return (f"{r['n']} answers to one {fmt_int(r['prompt_tokens'])}-token prompt hold **{g} blocks** as one request "
            f"with n = {r['n']} (the prompt's full blocks shared), **{i} blocks** as {r['n']} separate requests "
            "that share nothing "
            f"({r['block_size']} tokens a block; {i} ÷ {g} = {i / g:.1f}×)")


def sliding_window_bytes(model: str = SLIDING_MODEL, tokens: int = SLIDING_TOKENS) -> dict:
    """KV cache bytes of one sequence of ``tokens`` tokens in fp16 for a listed model with a
    sliding window, with it and without it (every layer full), from its config
    (:meth:`engine.model.model_spec.ModelSpec.kv_cache_bytes`).

    Returns:
        ``model``, ``tokens``, ``window`` (tokens), ``per_token`` (bytes), ``with_window`` and
        ``without`` (bytes).
    """
    spec = load_spec(model)
    full = dataclasses.replace(spec, sliding_window=None, sliding_layers=0)
    return {"model": model, "tokens": tokens, "window": spec.sliding_window,
            "per_token": spec.kv_bytes_per_token(2), "with_window": spec.kv_cache_bytes(tokens, 2),
            "without": full.kv_cache_bytes(tokens, 2)}


def cell_sliding(m, facts) -> str:
    s = sliding_window_bytes()
    return (f"computed, not measured: this model attends to every cached token in every layer. "
            f"{s['model'].split('/')[-1]} keeps the last {fmt_int(s['window'])}: at {fmt_int(s['tokens'])} tokens "
            f"its fp16 cache is {fmt_int(s['window'])} × {fmt_int(s['per_token'])} B = **{fmt_bytes(s['with_window'])}** "
            f"instead of {fmt_int(s['tokens'])} × {fmt_int(s['per_token'])} B = **{fmt_bytes(s['without'])}**")


def cell_smaller(m, facts) -> str:
    r, why = _pools(m)
    if why:
        return why
    per, pool = r["engine_bytes_per_token"], r["pool_bytes"]
    big, small = 8 * 2048 * per, 4 * 1024 * per
    text = (f"8 sequences × 2,048 tokens × {fmt_int(per)} B = **{fmt_bytes(big)}**; 4 × 1,024 × {fmt_int(per)} B = "
            f"**{fmt_bytes(small)}**, a quarter")
    if pool:
        text += f" (of this engine's {fmt_bytes(pool)} pool: {100 * big / pool:.0f}% → {100 * small / pool:.0f}%)"
    return text


@dataclasses.dataclass(frozen=True)
class Remedy:
    """One remedy of a bottleneck.

    Attributes:
        name: the remedy; what: what it changes, in a sentence; where: the lesson tab, the
        Playground control or this view's own Measure that shows it; cell:
        ``(measurements, facts) -> text`` of the figure it moved on this engine.
    """

    name: str
    what: str
    where: str
    cell: object


OVERHEAD = "Where a decode step's time goes"
QUANT_LINK = figure_link(quantization.TITLE, "lesson-quant-plot", "memory, speed and agreement")
CALC_LINK = figure_link(calculator.TITLE, "lesson-calc-table", "KV cache")

BOTTLENECKS = (
    ("High TTFT (time to first token)", "the prompt's prefill, or the wait before it", (
        Remedy("prefix cache", "a prompt that starts like an earlier one reuses its cached KV blocks",
               "Playground: send one long prompt twice; the metrics card counts the tokens “from the prefix cache”",
               cell_prefix),
        Remedy("shorter prompts", "fewer tokens to prefill: trim the system prompt, the history, the documents",
               figure_link(prefill.TITLE, "lesson-lat-sweep-plot", "Latency vs prompt length"), cell_short),
        Remedy("scheduling", "fewer prompts admitted per step, or short ones first, so a prompt waits less",
               figure_link(batch.TITLE, "lesson-batch-status", "time to first token") + ": alone against "
               "8 requests arriving at once", cell_scheduling),
    )),
    ("High TPOT (time per output token)", "every decode step reads all the weights for one token", (
        Remedy("chunked prefill", "a long prompt is split over several steps, so the answers already "
               "running keep their pace instead of waiting out the whole prefill; the long prompt's "
               "own first token comes a little later",
               "this view's **Measure**: "
               + figure_link(TITLE, remedies_chunked.PLOT_ID, remedies_chunked.TITLE.split(":")[0], prefix="")
               + ", a running answer's gaps and the long prompt's TTFT, chunked and in one step", cell_chunked),
        Remedy("speculative decoding", "guessed tokens are checked several at a time in one pass",
               figure_link(speculative.TITLE, "lesson-spec-plot", "Speculative decoding on this machine"),
               cell_speculative),
        Remedy("a compiled decode step", "small operators fused, Python overhead gone",
               figure_link(roofline.TITLE, "lesson-roof-overhead-plot", OVERHEAD)
               + " (press “Time eager against compiled”); the sidebar's decode-step badge",
               cell_compiled),
        Remedy("weight quantization", "fewer bytes to read per step", QUANT_LINK, cell_quant_step),
        Remedy("smaller batch", "fewer sequences share each step",
               figure_link(batch.TITLE, "lesson-batch-plot", "latency per token of each sequence"),
               cell_smaller_batch_tpot),
    )),
    ("KV cache near full", "every token of every sequence keeps its keys and values", (
        Remedy("GQA (grouped-query attention)", "several query heads share one key/value head",
               CALC_LINK + ": Llama-2-7B (32 KV heads) against Llama-3-8B (8)", cell_gqa),
        Remedy("fp8 KV cache", "one byte per element instead of two (or four)",
               f"{QUANT_LINK} (the fp8 KV rows); {CALC_LINK}: KV cache dtype", cell_fp8),
        Remedy("paging and block sharing", "memory in 16-token blocks, a shared prompt's blocks stored once",
               "the **Beams and samples** tab (n samples); the calculator's block sharing box", cell_sharing),
        Remedy("sliding window", "layers keep only the last W tokens",
               f"{CALC_LINK}: Mistral-7B at 32,768 tokens", cell_sliding),
        Remedy("smaller batch or context", "fewer sequences, or shorter ones, hold fewer tokens",
               f"{CALC_LINK}: batch and sequence length; Playground › sidebar **max new tokens**",
               cell_smaller),
    )),
    ("Weights don't fit", "the model's bytes exceed the device's memory", (
        Remedy("weight quantization", "int8 or int4 codes with per-group scales",
               f"{QUANT_LINK}; {CALC_LINK}: weights dtype", cell_quant_fit),
    )),
    ("Throughput flat with batch", "past the knee a step is compute- or overhead-bound", (
        Remedy("batching", "while memory-bound, more sequences per step cost little extra time",
               figure_link(batch.TITLE, "lesson-batch-plot", "throughput, all sequences") + ": the knee",
               cell_batching),
        Remedy("a compiled decode step", "when overhead, not memory or arithmetic, sets the step's time",
               figure_link(roofline.TITLE, "lesson-roof-overhead-plot", OVERHEAD) + ": the third regime",
               cell_compiled),
    )),
)
"""``(bottleneck, why it happens, remedies)`` in the order of the page."""


def remedies_markdown(m: dict | None, facts: dict | None = None) -> str:
    """Markdown: per bottleneck a table of its remedies, each with what it does, where it is
    shown and its figure on this engine (``m``: :func:`engine.experiments.remedies.measure`'s
    result or ``None``; ``facts``: ``compile`` (the engine's compile status),
    ``compile_run`` and ``quant_run`` (the lessons' last runs), ``max_num_batched_tokens``)."""
    facts = facts or {}
    out = []
    for title, why, remedies in BOTTLENECKS:
        out += [f"#### {title}", f"*{why}*", "",
                "| remedy | what it does | where to see it | on this engine |", "| --- | --- | --- | --- |"]
        out += [f"| **{r.name}** | {r.what} | {r.where} | {r.cell(m, facts)} |" for r in remedies]
        out.append("")
    if m and m.get("measured_at"):
        spent = sum((m.get("elapsed_s") or {}).values())
        out.append(f"Measured at {_ago(m['measured_at'])} in {spent:.0f} s on this engine; times move "
                   "with the machine's load, the ratios compare neighbouring runs.")
    return "\n".join(out)


def sampling_markdown(m: dict | None) -> str:
    """Q4's examples: the measured greedy and seeded sampled answers to one prompt."""
    r, why = _part(m, "sampling")
    if why:
        return f"**Q4 examples:** {why}"
    n = r["new_tokens"]
    lines = [f"**Q4 examples** (“{html.escape(r['prompt'])}”, at most {n} tokens; an answer cut "
             "there ends in “…”):", "", "| how | answer |", "| --- | --- |"]

    def cell(text: str, cut: bool) -> str:
        shown = html.escape(text).replace('|', '&#124;').replace(chr(10), ' ')
        return f"{shown}… *(cut at {n} tokens)*" if cut else shown

    cuts = r.get("greedy_cut") or [False] * len(r["greedy"])
    for i, (text, cut) in enumerate(zip(r["greedy"], cuts), 1):
        lines.append(f"| greedy, run {i} | {cell(text, cut)} |")
    shown_seeds = set()
    for s in r["sampled"]:
        again_mark = " (the same seed again)" if s["seed"] in shown_seeds else ""
        shown_seeds.add(s["seed"])
        lines.append(f"| temperature {r['temperature']:g}, seed {s['seed']}{again_mark} | "
                     f"{cell(s['text'], s.get('cut', False))} |")
    seeds = [x["seed"] for x in r["sampled"]]
    again = len(seeds) > len(set(seeds))
    same = [x["text"] for x in r["sampled"] if x["seed"] == seeds[0]]
    lines.append("\nGreedy " + ("gave the same answer both times" if r["greedy_equal"] else
                                 "parted between runs (a near-tie)")
                 + f"; sampling at temperature {r['temperature']:g} gave "
                 + ("different answers for different seeds" if len({x['text'] for x in r['sampled']}) > 1 else "one answer")
                 + (("; seed " + str(seeds[0]) + (" repeated its answer" if len(set(same)) == 1 else " did not repeat"))
                    if again else "") + ". Greedy suits facts, code and tests; sampling suits varied, creative text.")
    return "\n".join(lines)


def engine_facts(engine) -> dict:
    """What the cells quote without measuring: the compile status, the lessons' last runs and
    the engine's per-step token budget."""
    from app.tabs.lessons import last_runs

    cfg = getattr(engine, "config", None)
    status = engine.compile_status().as_dict() if hasattr(engine, "compile_status") else {}
    return {"compile": status, "compile_run": last_runs.latest("compile"),
            "quant_run": last_runs.latest("quantization"), "batch_run": last_runs.latest("batch"),
            "max_num_batched_tokens": getattr(cfg, "max_num_batched_tokens", 0)}


def run_measurements(engine, submit_kwargs: dict | None = None, progress=None) -> dict:
    """:func:`engine.experiments.remedies.measure` through ``engine`` as lesson requests (with
    the session's ``submit_kwargs``, such as its ``cache_salt``), after making sure the server
    has a recent batch sweep (:func:`app.tabs.lessons.batch.sweep`: the Batch size lesson's, run
    now when none is younger than 15 minutes), which the batching remedies print."""
    from app.tabs.lessons.runs import LessonEngine

    def part(lo: float, hi: float):  # progress of one phase as a slice of the whole bar
        return None if progress is None else (lambda f, msg: progress(lo + (hi - lo) * f, msg))

    batch.sweep(engine, part(0.0, 0.4), submit_kwargs)
    return measurements.measure(LessonEngine(engine, "remedies", submit_kwargs), progress=part(0.4, 1.0))


def keep_measure(m: dict) -> None:
    """Keep a Measure's results as the server's last (:mod:`app.tabs.lessons.last_runs`,
    ``"remedies"``), so a page load draws them again instead of an empty table."""
    from app.tabs.lessons import last_runs

    last_runs.record("remedies", {"measure": m})


def last_measure() -> dict | None:
    """The last Measure's results on this server (any visitor's), or ``None``; ``at`` (epoch
    seconds) is added to them."""
    from app.tabs.lessons import last_runs

    run = last_runs.latest("remedies")
    return {**run["measure"], "at": run["at"]} if run else None


def measured_note(m: dict | None) -> str:
    """``"Measured at 19:02 UTC in 41 s."`` (and the parts that failed) of a Measure, or ``""``."""
    if not m:
        return ""
    spent = sum((m.get("elapsed_s") or {}).values())
    failed = [k for k in measurements.PARTS if "error" in (m.get(k) or {})]
    at = f" at {time.strftime('%H:%M UTC', time.gmtime(m['at']))}" if m.get("at") else ""
    return f"Measured{at} in {spent:.0f} s." + (f" Not measured: {', '.join(failed)}." if failed else "")


def build(ctx) -> dict:
    """The lesson inside an open ``gr.Tab``: the questions, the measure button, the remedies
    tables and Q4's examples, wired to ``ctx.engine``. Returns the components by name
    (``rem_questions``, ``rem_run``, ``rem_status``, ``rem_table``, ``rem_chunk_plot``,
    ``rem_sampling``)."""
    from app.server.errors import guard
    from app.tabs.lessons.gate import gated
    from app.tabs.lessons import last_runs, remedy_links
    from app.tabs.lessons.common import elem

    engine, session_kwargs = ctx.engine, ctx.session_kwargs
    c: dict = {}
    gr.Markdown(TEXT)
    c["rem_questions"] = gr.Markdown(questions_markdown(), **elem("rem_questions"))

    batch_views = list(getattr(ctx, "batch_views", None) or [])  # the Batch size lesson's figure, summary

    def drawn(with_sweep: bool = True):  # from the last Measure (any visitor's) and the lessons' last runs
        m = last_measure()
        ours = (remedies_markdown(m, engine_facts(engine)), remedies_chunked.figure((m or {}).get("chunked_prefill")),
                sampling_markdown(m), measured_note(m))
        return ours + (batch.last_sweep_view() if batch_views and with_sweep else ())  # the one sweep, both tabs

    table, chunk_fig, sampling, status = drawn(with_sweep=False)
    with gr.Row():
        c["rem_run"] = gr.Button("Measure", variant="primary", scale=0, min_width=160,
                                 **elem("rem_run"))
        c["rem_status"] = gr.HTML(status, **elem("rem_status"))
    c["rem_table"] = gr.Markdown(table, **elem("rem_table"))
    c["rem_chunk_plot"] = gr.Plot(chunk_fig, show_label=False, elem_id=remedies_chunked.PLOT_ID)
    c["rem_sampling"] = gr.Markdown(sampling, **elem("rem_sampling"))

    outputs = [c["rem_table"], c["rem_chunk_plot"], c["rem_sampling"], c["rem_status"], *batch_views]
    seen = gr.State(-1)  # last_runs.version() when this page last drew them
    private = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")

    def drawn_now():  # with the version of the runs it quotes (read first: a later run redraws)
        now = last_runs.version()
        return (*drawn(), now)

    ctx.draw_when_shown(guard(drawn_now), None, [*outputs, seen])  # each time the tab shows
    page = getattr(ctx, "demo", None) or gr.context.Context.root_block  # the Blocks being built
    if page is not None:  # the links to figures on other lesson tabs open that tab first (remedy_links)
        page.load(None, None, None, js=remedy_links.follow_js(), api_visibility="private")

    def redrawn(drawn_at: int):  # a lesson or a Measure finished since this page drew: draw again
        now = last_runs.version()
        return (gr.skip(),) * len(outputs) + (drawn_at,) if now == drawn_at else (*drawn(), now)

    c["rem_timer"] = gr.Timer(REFRESH_S, active=ctx.timers_active)
    c["rem_timer"].tick(guard(redrawn), seen, [*outputs, seen], **private)

    def on_run(request: gr.Request, progress=gr.Progress()):
        try:
            m = run_measurements(engine, session_kwargs(request.session_hash), progress_adapter(progress))
        except ValueError as exc:
            return (gr.skip(),) * 3 + (error_html(str(exc)),) + (gr.skip(),) * (len(outputs) - 3)
        keep_measure(m)
        return drawn_now()

    c["rem_run"].click(guard(gated(on_run, "remedies")), None, [*outputs, seen], concurrency_limit=None,
                       api_visibility="private")
    return c
