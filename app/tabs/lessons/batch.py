"""Lesson: batch size. One click runs 1, 2, 4, 8 and 16 concurrent sequences through the page's
engine and plots the latency per token and the total throughput against the batch size.

The measuring is ``engine.experiments.batch`` (its ``engine`` backend: every sequence submitted
at once, continuous batching); here are the knee, the figure, the words and the layout. Lesson
requests carry lesson ids (:mod:`app.tabs.lessons.runs`). This module never imports torch.
"""

from __future__ import annotations

import html

import gradio as gr
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.experiments import batch

from app.server import fields
from app.server.errors import guard
from app.render.fmt import fmt_rate
from app.tabs.lessons.runs import LessonEngine

SIZES = (1, 2, 4, 8, 16)
KNEE_GAIN = 1.5  # a doubling of the batch that raises throughput less than this is past the knee
LATENCY, THROUGHPUT, IDEAL = "#E4572E", "#2E86AB", "#999999"

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
    "and comes out lower. Each size runs once; the prompts and the answer length stay fixed.")
DECODE = "#1B998B"


def decode_throughput(row: dict) -> float:
    """Decode-only throughput of one batch row, tokens/s: ``batch / TPOT`` with TPOT the row's
    ``per_token_latency_ms`` (median over its sequences) in seconds; 0.0 when TPOT is 0."""
    tpot_s = row["per_token_latency_ms"] / 1000
    return row["batch"] / tpot_s if tpot_s > 0 else 0.0


def run_batch(engine, new_tokens: int, progress=None, submit_kwargs: dict | None = None) -> dict:
    """Run :data:`SIZES` concurrent sequences, ``new_tokens`` each, through ``engine`` (once per
    size, after a short warm-up), as lesson requests.

    Returns:
        ``engine.experiments.batch.run``'s result; its ``rows`` hold, per batch size,
        ``per_token_latency_ms`` (median TPOT of the sequences, ms) and
        ``throughput_tokens_per_s`` (end to end: batch × new tokens / wall time, prefill
        included, tokens per second); :func:`decode_throughput` gives decode-only batch ÷ TPOT.

    Raises:
        ValueError: ``new_tokens`` outside [4, 128] (the message names it).
    """
    n = fields.whole("new_tokens", new_tokens)
    if not 4 <= n <= 128:
        raise ValueError(f"new_tokens must be in [4, 128], got {n}")
    return batch.run(engine.experiment_model(), quick=True, progress=progress, backends=["engine"], repeats=1,
                     engine=LessonEngine(engine, "batch", submit_kwargs), batch_sizes=list(SIZES),
                     new_tokens=n)


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


def batch_figure(rows: list[dict] | None) -> go.Figure:
    """Latency per token (ms, left) and throughput (tokens/s, right: end to end, the ideal of
    batch × batch-1's end-to-end rate, and decode-only batch ÷ TPOT) against the batch size;
    the knee as a dotted line. Traces: latency, end to end, ideal, decode-only."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("latency per token of each sequence (TPOT, ms)",
                                                        "throughput, all sequences (tokens/s)"))
    rows = sorted(rows or [], key=lambda r: r["batch"])
    b = [r["batch"] for r in rows]
    fig.add_trace(go.Scatter(x=b, y=[r["per_token_latency_ms"] for r in rows], mode="lines+markers",
                             name="latency per token", line={"color": LATENCY, "width": 2},
                             hovertemplate="batch %{x}: %{y:.1f} ms per token<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=b, y=[r["throughput_tokens_per_s"] for r in rows], mode="lines+markers",
                             name="end to end: batch × new tokens ÷ wall time (prefill included)",
                             line={"color": THROUGHPUT, "width": 2},
                             hovertemplate="batch %{x}: %{y:.0f} tokens/s end to end<extra></extra>"), row=1, col=2)
    if rows:
        one = rows[0]["throughput_tokens_per_s"] / rows[0]["batch"]
        fig.add_trace(go.Scatter(x=b, y=[one * x for x in b], mode="lines", name="if sequences were free",
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
            fig.add_annotation(x=k, y=1, yref="y2 domain", xref="x2", text=f"knee: batch {k}",
                               showarrow=False, yanchor="bottom", font={"size": 12})
    else:
        fig.add_annotation(text="Press “Run the batch sweep”", xref="paper", yref="paper", x=0.5, y=0.5,
                           showarrow=False, font={"size": 14, "color": "#888"})
    fig.update_xaxes(type="log", tickvals=list(SIZES), ticktext=[str(s) for s in SIZES],
                     title_text="concurrent sequences", range=[-0.1, 1.3])
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(template="plotly_white", height=340, margin={"l": 60, "r": 20, "t": 50, "b": 50},
                      legend={"orientation": "h", "y": -0.25, "x": 0})
    return fig


def _decode_line(row: dict) -> str:
    """``"<b>55.4 tok/s</b> (16 ÷ 0.289 s)"``: decode-only throughput with the division it is."""
    return (f"<b>{fmt_rate(decode_throughput(row))}</b> ({row['batch']} ÷ "
            f"{row['per_token_latency_ms'] / 1000:.3f} s)")


def batch_summary(res: dict) -> str:
    """HTML: the knee in numbers and why it is there (or that no knee showed up to batch 16)."""
    rows = [r for r in res.get("rows", []) if r.get("backend", "engine") == "engine"]
    if not rows:
        return ""
    rows = sorted(rows, key=lambda r: r["batch"])
    first, last = rows[0], rows[-1]
    span = (f"From batch {first['batch']} to {last['batch']}, end-to-end throughput went from "
            f"<b>{fmt_rate(first['throughput_tokens_per_s'])}</b> to <b>{fmt_rate(last['throughput_tokens_per_s'])}</b> "
            f"({last['throughput_tokens_per_s'] / first['throughput_tokens_per_s']:.1f}×) and decode-only "
            f"throughput from {_decode_line(first)} to {_decode_line(last)}, while the latency per token "
            f"went from {first['per_token_latency_ms']:.0f} ms to {last['per_token_latency_ms']:.0f} ms "
            f"({last['per_token_latency_ms'] / first['per_token_latency_ms']:.1f}×). ")
    k = knee(rows)
    if k["batch"] is None:
        why = (f"Every doubling raised throughput by at least {KNEE_GAIN:g}×: up to batch {last['batch']} "
               "the step is still bound by reading the weights, so no knee yet.")
    else:
        why = (f"The <b>knee is at batch {k['batch']}</b>: going to {k['next']} raised end-to-end throughput only "
               f"{k['throughput_gain']:.2f}× and made each token {k['latency_growth']:.2f}× slower. Below it "
               "the step mostly streams the weights, shared by every sequence; past it the arithmetic (and each "
               "sequence's own KV cache) grows with the batch, so extra sequences mostly wait.")
    n = res.get("new_tokens")
    return (f"<div class='lesson-result'>{span}{why}<br><span class='lesson-note'>{html.escape(str(n))} new "
            "tokens per sequence, greedy, one run per size on a shared machine (other users' requests may join "
            "the steps); these requests are labelled as lesson runs.</span></div>")



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
    c: dict = {}
    gr.Markdown(TEXT)
    with gr.Row():
        c["batch_tokens"] = gr.Slider(8, 64, value=24, step=8, label="new tokens per sequence",
                                      elem_id="lesson-batch-tokens", scale=3)
        c["batch_run"] = gr.Button("Run the batch sweep (1, 2, 4, 8, 16 sequences)", variant="primary",
                                   elem_id="lesson-batch-run", scale=2)
    c["batch_plot"] = gr.Plot(batch_figure(None), show_label=False, elem_id="lesson-batch-plot")
    c["batch_status"] = gr.HTML("", elem_id="lesson-batch-status")

    def on_run(n, request: gr.Request, progress=gr.Progress()):
        kwargs = session_kwargs(request.session_hash) if request is not None else {}
        try:
            res = run_batch(engine, n, lambda f, m: progress(f, desc=m), kwargs)
        except ValueError as exc:
            raise gr.Error(str(exc), print_exception=False) from None
        return batch_figure(res["rows"]), batch_summary(res)

    c["batch_run"].click(guard(on_run), c["batch_tokens"], [c["batch_plot"], c["batch_status"]],
                         concurrency_limit=1, concurrency_id="lesson-runs", api_visibility="private")
    return c
