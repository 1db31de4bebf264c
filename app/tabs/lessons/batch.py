"""Lesson: batch size. One click runs 1, 2, 4, 8 and 16 concurrent sequences through the page's
engine, :data:`REPEATS` rounds in turns, and plots the medians of the latency per token and the
total throughput against the batch size, beside the batch where this machine's measured ridge
point says decode turns compute-bound.

The measuring is ``engine.experiments.batch`` (its ``engine`` backend: every sequence submitted
at once, continuous batching); the ridge and the model's intensity are the roofline lesson's
(:func:`app.tabs.lessons.roofline.measure_machine`, :mod:`engine.experiments.intensity`); here
are the knee, the figure, the words and the layout. Lesson requests carry lesson ids
(:mod:`app.tabs.lessons.runs`). This module never imports torch.
"""

from __future__ import annotations

import html
import time
import math

import gradio as gr
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.experiments import batch

from app.server import fields
from app.server.errors import guard
from app.tabs.lessons.gate import gated
from app.render.fmt import fmt_int, fmt_rate, fmt_seconds
from app.tabs.lessons import last_runs, machine_profile, profile_panel
from app.tabs.lessons.roofline import measure_machine, model_shape
from app.tabs.lessons.runs import LessonEngine

SIZES = (1, 2, 4, 8, 16)
REPEATS = 3  # rounds of every size, in turns; odd, so each median is one run's figure
KNEE_GAIN = 1.5  # a doubling of the batch that raises throughput less than this is past the knee
LATENCY, THROUGHPUT, IDEAL, RIDGE = "#E4572E", "#2E86AB", "#999999", "#6d28d9"

TITLE = "Batch size"
TEXT = (
    "A decode step reads every weight once, however many sequences share it, so at first extra "
    "sequences ride almost free: total throughput climbs while each sequence's latency per token "
    "barely moves. Look for the **knee**, the batch after which doubling the sequences buys little "
    "throughput and mostly makes every token slower: there the step stops waiting for memory and "
    "starts waiting for arithmetic (see the next lesson).\n\n"
    "Two throughputs, both in tokens per second over all sequences: **decode-only = batch ÷ TPOT** "
    "(TPOT is each sequence's time per output token after the first, median over the sequences), the "
    "rate of the decode steps alone; and **end-to-end = batch × new tokens ÷ wall time**, from the "
    "moment the requests go in to the last one finishing, so it includes the prefill of every prompt "
    "and comes out lower.\n\n"
    f"Every size runs **{REPEATS} times, in turns** (1, 2, 4, 8, 16, then again), and each point is "
    "the **median** of its runs, so a slow moment of a shared machine touches every size alike. "
    "Only the number of sequences changes: the prompts, the answer length, greedy decoding, the "
    "weights and the KV cache's precision stay the same, and every request has a prefix-cache salt of "
    "its own, so the cache shares nothing, not even the chat template's system prompt. The run also takes this machine's ridge point from the machine "
    "profile (the panel at the right; measured when there is none), to say at which batch decode should turn "
    "compute-bound.")
DECODE = "#1B998B"


def decode_throughput(row: dict) -> float:
    """Decode-only throughput of one batch row, tokens/s: ``batch / TPOT`` with TPOT the row's
    ``per_token_latency_ms`` (median over its sequences and runs) in seconds; 0.0 when TPOT is 0."""
    tpot_s = row["per_token_latency_ms"] / 1000
    return row["batch"] / tpot_s if tpot_s > 0 else 0.0


def mean_context(rows: list[dict], new_tokens: int) -> int:
    """Tokens in a sequence's KV cache at the middle decode step: the longest prompt of the rows
    plus half the answer, ``prompt + (new_tokens − 1) / 2`` rounded half up (the context the
    ridge crossing is computed at)."""
    prompt = max((int(r.get("prompt_tokens", 0)) for r in rows), default=0)
    return prompt + int(new_tokens) // 2  # = floor(prompt + (new_tokens − 1) / 2 + 0.5)


def ridge_crossing(shape, machine: dict, context: int) -> dict:
    """Where this machine's ridge point meets the model's decode step, in the figures the page
    prints: GFLOP/s and GB/s rounded to one decimal, the ridge their quotient (so the printed
    division is exact), and the smallest batch whose step at ``context`` tokens reaches it.

    Args:
        shape: the model's :class:`engine.experiments.intensity.DecodeShape`.
        machine: the server's machine profile (:func:`app.tabs.lessons.machine_profile.current`
            of :func:`app.tabs.lessons.roofline.measure_machine`: ``flops_per_s``,
            ``bandwidth_gb_per_s``, ``device``, ``dtype``, and ``measured_at`` for the stamp).
        context: tokens of context per sequence.

    Returns:
        ``{"gflops", "bandwidth_gb_per_s", "ridge", "context", "batch", "intensity_at",
        "intensity_before", "device", "dtype", "stamp"}``: ``ridge`` in FLOPs per byte; ``batch`` the
        crossing (``None`` when no batch up to 2²⁰ reaches the ridge); ``intensity_at`` and
        ``intensity_before`` the step's FLOPs per byte at that batch and the one below it.
    """
    gflops = round(machine["flops_per_s"] / 1e9, 1)
    bw = round(machine["bandwidth_gb_per_s"], 1)
    ridge = gflops / bw if bw > 0 else float("inf")
    b = shape.crossover_batch(ridge, context)
    return {"gflops": gflops, "bandwidth_gb_per_s": bw, "ridge": ridge, "context": context, "batch": b,
            "intensity_at": shape.intensity(b, context) if b else None,
            "intensity_before": shape.intensity(b - 1, context) if b and b > 1 else None,
            "device": machine.get("device", ""), "dtype": machine.get("dtype", ""),
            "stamp": machine_profile.stamp(machine) if "measured_at" in machine else ""}


def run_batch(engine, new_tokens: int, progress=None, submit_kwargs: dict | None = None) -> dict:
    """Run :data:`SIZES` concurrent sequences, ``new_tokens`` each, through ``engine``
    (:data:`REPEATS` rounds, the sizes in turns, after a short warm-up), as lesson requests;
    then this machine's ridge point from the server's machine profile (the roofline lesson's
    figures; measured now when there is none, or it is older than
    :data:`app.tabs.lessons.machine_profile.MAX_AGE_S`).

    Returns:
        ``engine.experiments.batch.run``'s result; its ``rows`` hold, per batch size, the medians
        over the rounds of ``per_token_latency_ms`` (TPOT of the sequences, ms),
        ``throughput_tokens_per_s`` (end to end: batch × new tokens / wall time, prefill
        included, tokens per second) and ``ttft_s`` (seconds), with every round's figures;
        :func:`decode_throughput` gives decode-only batch ÷ TPOT. Added: ``ridge``
        (:func:`ridge_crossing` at :func:`mean_context`). The sweep is kept as the server's one
        batching curve (:func:`record_last_run`): the Remedies lesson and the machine profile
        panel print it, never a sweep of their own.

    Raises:
        ValueError: ``new_tokens`` outside [4, 128] (the message names it).
    """
    n = fields.whole("new_tokens", new_tokens)
    if not 4 <= n <= 128:
        raise ValueError(f"new_tokens must be in [4, 128], got {n}")
    started = time.time()
    res = batch.run(engine.experiment_model(), quick=True, progress=progress, backends=["engine"],
                    repeats=REPEATS, engine=LessonEngine(engine, "batch", submit_kwargs),
                    batch_sizes=list(SIZES), new_tokens=n)
    if progress is not None:
        progress(1.0, "measuring this machine's bandwidth and FLOP/s")
    profile = machine_profile.current(lambda: measure_machine(engine))
    res["ridge"] = ridge_crossing(model_shape(engine), profile, mean_context(res["rows"], n))
    record_last_run(res["rows"], n, profile["measured_at"] if profile["measured_at"] >= started else None,
                    ridge=res["ridge"])
    return res


KEPT = ("batch", "throughput_tokens_per_s", "per_token_latency_ms", "ttft_s", "decode_throughput_tokens_per_s",
        "prompt_tokens", "cached_prompt_tokens")
"""The fields of a sweep's rows kept as the server's batching curve (each a median over the rounds)."""


def record_last_run(rows: list[dict], new_tokens: int, profile_at: float | None = None,
                    ridge: dict | None = None) -> None:
    """Keep a sweep as the server's one batching curve (:mod:`app.tabs.lessons.last_runs`,
    ``"batch"``): per size the medians of :data:`KEPT` that the rows hold, its knee, the answer
    length, the rounds and the ridge crossing (:func:`ridge_crossing`, or ``None``).
    ``profile_at``: the machine profile's ``measured_at`` when this run measured it itself (its
    figures and the profile's then come from one moment)."""
    rows = sorted(rows, key=lambda r: r["batch"])
    last_runs.record("batch", {"new_tokens": new_tokens, "rounds": REPEATS, "knee": knee(rows)["batch"],
                               "profile_at": profile_at, "ridge": ridge,
                               "rows": [{k: r[k] for k in KEPT if k in r} for r in rows]})


DEFAULT_NEW_TOKENS = 24
"""The sweep's answer length (tokens per sequence) when no one chose one: the slider's default,
and the length of a sweep that Remedies runs for want of a recent one."""


def sweep(engine, progress=None, submit_kwargs: dict | None = None, max_age_s: float = machine_profile.MAX_AGE_S,
          clock=time.time) -> dict:
    """The server's batching curve: the last sweep (this lesson's, any visitor's) while younger
    than ``max_age_s`` seconds, else a new one of :data:`DEFAULT_NEW_TOKENS` tokens
    (:func:`run_batch`, a minute or so on a CPU). Other panels print this, so the page shows one
    batch-1 time per token and one batching curve.

    Returns:
        :func:`app.tabs.lessons.last_runs.latest` of ``"batch"``: ``rows`` (:data:`KEPT` per
        size), ``new_tokens``, ``rounds``, ``knee``, ``ridge``, ``at`` (epoch seconds), ``load``.
    """
    run = last_runs.latest("batch")
    if run is None or clock() - run["at"] > max_age_s:
        run_batch(engine, DEFAULT_NEW_TOKENS, progress, submit_kwargs)
        run = last_runs.latest("batch")
    return run


def last_sweep_view() -> tuple:
    """The figure and summary of the server's last sweep (whoever ran it, this lesson or Remedies'
    Measure), headed with when it ran; an empty figure and ``""`` before any."""
    run = last_runs.latest("batch")
    if not run:
        return batch_figure(None), ""
    res = {"rows": run["rows"], "new_tokens": run["new_tokens"], "repeats": run["rounds"], "ridge": run.get("ridge")}
    at = time.strftime("%H:%M UTC", time.gmtime(run["at"]))
    load = f", load average {run['load']:g}" if run.get("load") is not None else ""
    head = f"<span class='lesson-note'>The server's last sweep, at {at}{load}.</span>"
    return batch_figure(run["rows"], (run.get("ridge") or {}).get("batch")), head + batch_summary(res)


def batch1_tpot_note(tpot_ms: float, new_tokens: int) -> str:
    """For another panel that prints a batch-1 TPOT of ``tpot_ms`` (ms, over ``new_tokens`` new
    tokens): this lesson's last run's batch-1 TPOT beside it, both as
    :func:`app.render.fmt.fmt_seconds` prints them, with the time it ran and why the two differ;
    ``""`` before this lesson has run at batch 1."""
    run = last_runs.latest("batch")
    row = next((r for r in (run or {}).get("rows", []) if r["batch"] == 1), None)
    if row is None:
        return ""
    at = time.strftime("%H:%M UTC", time.gmtime(run["at"]))
    there_ms, there_n = row["per_token_latency_ms"], run["new_tokens"]
    head = (f" The Batch size lesson's last run ({at}) measured <b>{fmt_seconds(there_ms / 1000)}"
            f"</b> at batch 1 against {fmt_seconds(tpot_ms / 1000)} here: another moment of a shared machine "
            f"(its load moves both)")
    if there_n == new_tokens:
        return head + f" with the same answer length ({new_tokens} new tokens), so the two differ."
    # a longer answer reads a longer KV cache at every step: slower, unless the load moved more
    longer_slower = (new_tokens > there_n) == (tpot_ms > there_ms)
    lengths = f"{there_n} new tokens there, {new_tokens} here"
    if longer_slower:
        return head + (f" and another answer length ({lengths}; a longer answer reads a longer KV "
                       "cache at every step), so the two differ.")
    return head + (f". The answer lengths differ too ({lengths}), but here the longer answer was the "
                   "faster one: the machine's load, not the longer KV cache, made the difference.")


def knee(rows: list[dict], gain: float = KNEE_GAIN) -> dict:
    """Where doubling the batch stops paying: the first step between two sizes whose throughput
    grew less than ``gain`` times.

    Args:
        rows: ``{"batch", "throughput_tokens_per_s", "per_token_latency_ms"}`` per size, any order.

    Returns:
        ``{"batch"}``: the last size before that step (``None`` when every step paid), with
        ``next``, ``throughput_gain`` and ``latency_growth`` (the ratios across that step).
    """
    rows = sorted(rows, key=lambda r: r["batch"])
    for a, b in zip(rows, rows[1:]):
        t_gain = b["throughput_tokens_per_s"] / a["throughput_tokens_per_s"] if a["throughput_tokens_per_s"] else 0.0
        if t_gain < gain:
            l_growth = (b["per_token_latency_ms"] / a["per_token_latency_ms"]) if a["per_token_latency_ms"] else 0.0
            return {"batch": a["batch"], "next": b["batch"], "throughput_gain": t_gain,
                    "latency_growth": l_growth}
    return {"batch": None, "next": None, "throughput_gain": None, "latency_growth": None}


X_RANGE = (-0.1, 1.3)
"""The batch axis's range, log10 of the batch (about 0.8 to 20)."""


def free_rate(rows: list[dict]) -> tuple[float, int]:
    """The "if sequences were free" line's slope: the highest decode-only rate per sequence
    (:func:`decode_throughput` ÷ batch, tokens/s) of the sweep, and the batch it was measured at
    (batch 1 unless a larger batch's step ran faster per sequence). Built from decode-only
    throughput, not end to end (which includes the prefill), the line never lies below the
    measured decode-only curve."""
    best = max(rows, key=lambda r: decode_throughput(r) / r["batch"])
    return decode_throughput(best) / best["batch"], best["batch"]


def batch_figure(rows: list[dict] | None, ridge_batch: int | None = None) -> go.Figure:
    """Latency per token (ms, left) and throughput (tokens/s, right: end to end, the ideal of
    batch × the decode-only rate per sequence (:func:`free_rate`), and decode-only batch ÷ TPOT)
    against the batch size, each point a median over the rounds; the knee as a dotted line, and
    ``ridge_batch`` (where this machine's ridge point says decode turns compute-bound) as a
    dashed one when it is on the axis, else named at the axis's right edge (a log axis places
    annotations by log10 of the batch). Traces: latency, end to end, ideal, decode-only."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("latency per token of each sequence (TPOT, ms)",
                                                        "throughput, all sequences (tokens/s)"))
    rows = sorted(rows or [], key=lambda r: r["batch"])
    b = [r["batch"] for r in rows]
    fig.add_trace(go.Scatter(x=b, y=[r["per_token_latency_ms"] for r in rows], mode="lines+markers",
                             name="latency per token (median)", line={"color": LATENCY, "width": 2},
                             hovertemplate="batch %{x}: %{y:.1f} ms per token<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=b, y=[r["throughput_tokens_per_s"] for r in rows], mode="lines+markers",
                             name="end to end: batch × new tokens ÷ wall time (prefill included)",
                             line={"color": THROUGHPUT, "width": 2},
                             hovertemplate="batch %{x}: %{y:.0f} tokens/s end to end<extra></extra>"), row=1, col=2)
    if rows:
        one, at = free_rate(rows)
        fig.add_trace(go.Scatter(x=b, y=[one * x for x in b], mode="lines",
                                 name=f"if sequences were free (batch × batch {at}'s decode rate per sequence)",
                                 line={"color": IDEAL, "dash": "dash", "width": 1},
                                 hovertemplate="batch %{x}: %{y:.0f} tokens/s (ideal)<extra></extra>"),
                      row=1, col=2)
        fig.add_trace(go.Scatter(x=b, y=[decode_throughput(r) for r in rows], mode="lines+markers",
                                 name="decode only: batch ÷ TPOT", line={"color": DECODE, "width": 2},
                                 hovertemplate="batch %{x}: %{y:.0f} tokens/s decoding<extra></extra>"),
                      row=1, col=2)
        k = knee(rows)["batch"]
        if k is not None:
            for col in (1, 2):
                fig.add_vline(x=k, line_dash="dot", line_color="#555", row=1, col=col)
            fig.add_annotation(x=math.log10(k), y=1, yref="y2 domain", xref="x2", text=f" knee: batch {k}",
                               showarrow=False, xanchor="left", yanchor="top", font={"size": 12})
        if ridge_batch is not None and SIZES[0] <= ridge_batch <= SIZES[-1]:
            fig.add_vline(x=ridge_batch, line_dash="dash", line_color=RIDGE, row=1, col=1)
            fig.add_annotation(x=math.log10(ridge_batch), y=1, yref="y domain", xref="x",
                               text=f" ridge: batch ≈ {ridge_batch}", showarrow=False, xanchor="left",
                               yanchor="top", font={"size": 12, "color": RIDGE})
        elif ridge_batch is not None:   # off the axis: said at its right edge
            fig.add_annotation(x=X_RANGE[1], y=1, yref="y domain", xref="x",
                               text=f"ridge: batch ≈ {fmt_int(ridge_batch)}, off this axis →",
                               showarrow=False, xanchor="right", yanchor="top",
                               font={"size": 12, "color": RIDGE})
    else:
        fig.add_annotation(text="Press “Run the batch sweep”", xref="paper", yref="paper", x=0.5, y=0.5,
                           showarrow=False, font={"size": 14, "color": "#888"})
    fig.update_xaxes(type="log", tickvals=list(SIZES), ticktext=[str(s) for s in SIZES],
                     title_text="concurrent sequences", range=list(X_RANGE))
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(template="plotly_white", height=340, margin={"l": 60, "r": 20, "t": 50, "b": 50},
                      legend={"orientation": "h", "y": -0.25, "x": 0})
    return fig


def shown_rate(r: float) -> float:
    """A rate as :func:`app.render.fmt.fmt_rate` prints it (one decimal below 100, none above)."""
    return round(r, 1) if r < 100 else float(round(r))


def _decode_line(row: dict) -> str:
    """``"<b>55.3 tok/s</b> (16 ÷ 0.2894 s)"``: decode-only throughput as the division of the
    printed figures (TPOT rounded to 0.1 ms, the rate that TPOT's quotient)."""
    tpot = round(row["per_token_latency_ms"] / 1000, 4)
    rate = row["batch"] / tpot if tpot > 0 else 0.0
    return f"<b>{fmt_rate(rate)}</b> ({row['batch']} ÷ {tpot:.4f} s)"


def ridge_html(r: dict | None, knee_batch: int | None) -> str:
    """HTML: this machine's ridge point as a division of the printed figures, the batch where the
    model's decode step reaches it, and the measured knee beside it (empty without ``r``)."""
    if not r:
        return ""
    where = f"{html.escape(str(r['device']))}, {html.escape(str(r['dtype']))}"
    text = (f"<br><b>This machine's ridge point</b> ({where}) is {r['gflops']:,.1f} GFLOP/s ÷ "
            f"{r['bandwidth_gb_per_s']:,.1f} GB/s = <b>{r['ridge']:,.1f} FLOPs per byte</b> (a "
            "matmul's speed over the memory read bandwidth: "
            + (f"this machine's profile, {html.escape(r['stamp'])}, the same figures the panel "
               "at the right and the next lesson print; the panel's “Measure again” takes them again" if r.get("stamp") else
               "measured just now as in the next lesson") + "). ")
    ctx = fmt_int(r["context"])
    if r["batch"] is None:
        return text + (f"With {ctx} tokens of context per sequence no batch of this model's decode step "
                       "reaches it: decode stays memory-bound at any batch.")
    if r["batch"] == 1:
        text += (f"This model's decode step at {ctx} tokens of context already does "
                 f"{r['intensity_at']:.1f} FLOPs per byte at batch 1, so decode is compute-bound "
                 "from the start. ")
    else:
        text += (f"This model's decode step at {ctx} tokens of context (the longest prompt plus half the "
                 f"answer) does {r['intensity_before']:.1f} FLOPs per byte at batch {r['batch'] - 1} and "
                 f"{r['intensity_at']:.1f} at batch {r['batch']}, so decode turns compute-bound at "
                 f"<b>batch ≈ {r['batch']}</b> (the next lesson's formula). ")
    if knee_batch is not None:
        text += (f"The knee measured above is at batch {knee_batch}. The ridge is a bound, not a forecast: "
                 "a step also pays for Python and small operators (the next lesson's third regime), and a "
                 "CPU's matmul speed depends on the matrices' shapes.")
    return text


def decode_peak_html(rows: list[dict], knee_batch: int | None) -> str:
    """Where decode-only throughput (:func:`decode_throughput`) peaks, when that is not the
    end-to-end knee ``knee_batch``: the two curves of the plot answer different questions (the
    end-to-end one counts every sequence's prefill), and a reader sees both (rows sorted by
    batch; "" when the peak is the knee or the last size with no knee)."""
    peak = max(rows, key=decode_throughput)
    last = rows[-1]["batch"]
    if peak["batch"] == knee_batch or (knee_batch is None and peak["batch"] == last):
        return ""
    where = "before" if knee_batch is not None and peak["batch"] < knee_batch else "past" \
        if knee_batch is not None else "below"
    return (f" Decode-only throughput (batch ÷ TPOT, the prefills left out) peaks at <b>batch "
            f"{peak['batch']}</b>, {_decode_line(peak)}, {where} "
            f"{'the end-to-end knee' if knee_batch is not None else f'batch {last}'}: the end-to-end "
            "figure also pays for every added sequence's prompt, so its knee and the decode step's "
            "own peak need not be the same batch.")


def batch_summary(res: dict) -> str:
    """HTML: the knee in numbers and why it is there (or that no knee showed up to batch 16),
    the ridge point's batch beside it, and what the runs held fixed. Ratios are of the printed
    figures."""
    rows = [r for r in res.get("rows", []) if r.get("backend", "engine") == "engine"]
    if not rows:
        return ""
    rows = sorted(rows, key=lambda r: r["batch"])
    first, last = rows[0], rows[-1]
    t0, t1 = shown_rate(first["throughput_tokens_per_s"]), shown_rate(last["throughput_tokens_per_s"])
    l0, l1 = round(first["per_token_latency_ms"]), round(last["per_token_latency_ms"])
    span = (f"From batch {first['batch']} to {last['batch']}, end-to-end throughput went from "
            f"<b>{fmt_rate(t0)}</b> to <b>{fmt_rate(t1)}</b> ({t1 / t0 if t0 else 0:.1f}×) and decode-only "
            f"throughput from {_decode_line(first)} to {_decode_line(last)}, while the latency per token "
            f"went from {l0:.0f} ms to {l1:.0f} ms ({l1 / l0 if l0 else 0:.1f}×). ")
    if "ttft_s" in first and "ttft_s" in last:
        span += (f"The <b>time to first token</b> (median over the sequences) went from "
                 f"{first['ttft_s'] * 1000:,.0f} ms alone to {last['ttft_s'] * 1000:,.0f} ms at batch {last['batch']}: "
                 "prompts that arrive together share the prefill steps, so the later ones wait their turn. ")
    k = knee(rows)
    if k["batch"] is None:
        why = (f"Every doubling raised throughput by at least {KNEE_GAIN:g}×: up to batch {last['batch']} "
               "the step is still bound by reading the weights, so no knee yet.")
    else:
        why = (f"The <b>knee is at batch {k['batch']}</b>: going to {k['next']} raised end-to-end throughput only "
               f"{k['throughput_gain']:.2f}× and made each token {k['latency_growth']:.2f}× slower. Below it "
               "the step mostly streams the weights, shared by every sequence; past it the arithmetic (and each "
               "sequence's own KV cache) grows with the batch, so extra sequences mostly wait.")
    why += decode_peak_html(rows, k["batch"])
    n = res.get("new_tokens")
    runs = res.get("repeats", 1)
    cached = sum(int(r.get("cached_prompt_tokens", 0)) for r in rows)
    prompt = max(int(r.get("prompt_tokens", 0)) for r in rows)
    each = (f"each point is the median of {runs} runs, the sizes taking turns" if runs > 1 else "one run per size")
    held = (f"Held fixed: the same {len(batch.PROMPTS)} prompts (up to {fmt_int(prompt)} tokens, each "
            f"with a cache salt of its own, so the prefix cache served {fmt_int(cached)} tokens), "
            f"{html.escape(str(n))} new tokens per sequence, greedy with the end-of-text token ignored, "
            "the page's weights and KV cache precision; only the number of sequences changes")
    return (f"<div class='lesson-result'>{span}{why}{ridge_html(res.get('ridge'), k['batch'])}<br>"
            f"<span class='lesson-note'>{held}. {each.capitalize()}, on a shared machine (other users' "
            "requests may join the steps); these requests are labelled as lesson runs.</span></div>")


def build(ctx) -> dict:
    """The lesson's tab content (call inside an open ``gr.Tab``): words, the answer-length slider,
    the run button, the figure and the summary.

    Args:
        ctx: the :class:`app.tabs.context.TabContext` (its ``engine``, and its
            ``session_kwargs``: the session's ``cache_salt``).

    Returns:
        The components by name (``batch_tokens``, ``batch_run``, ``batch_plot``, ``batch_status``).
    """
    engine, session_kwargs = ctx.engine, ctx.session_kwargs
    profile_view = getattr(ctx, "profile_view", None)  # the profile panel, redrawn after a sweep
    c: dict = {}
    gr.Markdown(TEXT)
    with gr.Row():
        c["batch_tokens"] = gr.Slider(8, 64, value=DEFAULT_NEW_TOKENS, step=8, label="new tokens per sequence",
                                      elem_id="lesson-batch-tokens", scale=3)
        c["batch_run"] = gr.Button(f"Run the batch sweep (1, 2, 4, 8, 16 sequences, {REPEATS} rounds)", variant="primary",
                                   elem_id="lesson-batch-run", scale=2)
    figure, summary = last_sweep_view()  # the server's last sweep, whoever ran it
    c["batch_plot"] = gr.Plot(figure, show_label=False, elem_id="lesson-batch-plot")
    c["batch_status"] = gr.HTML(summary, elem_id="lesson-batch-status")
    # drawn again each time the tab shows (a reload loses nothing)
    ctx.draw_when_shown(guard(last_sweep_view), None, [c["batch_plot"], c["batch_status"]])
    ctx.batch_views = [c["batch_plot"], c["batch_status"]]  # Remedies redraws them after its sweep

    def on_run(n, request: gr.Request, progress=gr.Progress()):
        kwargs = session_kwargs(request.session_hash) if request is not None else {}
        try:
            res = run_batch(engine, n, lambda f, m: progress(f, desc=m), kwargs)
        except ValueError as exc:
            raise gr.Error(str(exc), print_exception=False) from None
        out = (batch_figure(res["rows"], (res.get("ridge") or {}).get("batch")), batch_summary(res))
        return out + ((profile_panel.current_html(),) if profile_view is not None else ())

    outputs = [c["batch_plot"], c["batch_status"]] + ([profile_view] if profile_view is not None else [])
    c["batch_run"].click(guard(gated(on_run, "batch size")), c["batch_tokens"], outputs,
                         concurrency_limit=None, api_visibility="private")
    return c
