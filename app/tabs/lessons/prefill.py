"""The prefill and decode lesson: the prompt-length sweep, the decode share, why decode is
memory-bound, and whole-request latency (TTFT, TPOT, total) against the prompt's length.

The runs are :mod:`engine.experiments.prompt_length`, :mod:`engine.experiments.decode_share` and
:mod:`engine.experiments.prompt_latency` on the page's engine (as lesson runs); here are their
figures and conclusions. No torch here.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.experiments import decode_share, prompt_latency, prompt_length
from engine.experiments.intensity import DecodeShape

from app.render.figures import _hint
from app.render.fmt import fmt_bytes, fmt_int, fmt_rate, fmt_seconds
from app.server import fields
from app.tabs.lessons.common import DECODE, HEIGHT, PREFILL, layout, progress_adapter
from app.tabs.lessons.runs import LessonEngine

LENGTHS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)

TITLE = "Prefill and decode"
TEXT = (
    "Prefill reads the whole prompt at once (long prompts in chunks of a few hundred tokens), "
    "so it processes many tokens per second. Watch where its time starts to grow with the "
    "prompt: on a GPU short prompts cost almost the same, while a CPU saturates early. Then see "
    "how small prefill is next to decode, which produces one token per step.\n\n"
    "**Why decode is so much slower per token: it is memory-bound.** A decode step must read "
    "every weight from memory to compute one token per sequence, about 2 floating-point "
    "operations (FLOPs) per weight. Its **arithmetic intensity** (FLOPs per byte read) is "
    "therefore tiny, and the memory **bandwidth**, not the arithmetic units, sets its speed. "
    "Prefill reads each weight once for all the prompt's tokens, so its intensity is that many "
    "times higher, until the arithmetic units limit it (compute-bound). Run the decode share to "
    "see the two speeds side by side.")


SWEEP_HINT = "Press “Run prompt length sweep” to measure prefill time against prompt length"
SHARE_HINT = "Press “Run decode share” to split one request's time into prefill and decode"


def sweep_figure(res: dict | None, largest: int = 1024) -> go.Figure:
    """Prefill time (ms, left) and time per prompt token (ms, right) against prompt tokens.

    Both axes are linear, so a linear rise looks linear; lines join the medians, dots are the
    single runs. Hover shows prefill tokens/s. Before a run (``res`` is ``None``) the same
    panels and axes, empty, the x axes up to ``largest`` prompt tokens, with a note on what
    to press.
    """
    empty = not res
    if empty:
        res = {"prompt_tokens": [], "prefill_s": [], "prefill_tokens_per_s": []}
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("prefill time (ms)", "time per prompt token (ms)"))
    x = list(res["prompt_tokens"])
    runs = res.get("runs_s") or [[s] for s in res["prefill_s"]]
    repeats = max((len(r) for r in runs), default=1)
    rate = [f"{r:,.0f} tok/s" for r in res["prefill_tokens_per_s"]]
    med_ms = [s * 1000 for s in res["prefill_s"]]
    per_tok = [s * 1000 / t if t else 0.0 for s, t in zip(res["prefill_s"], x)]
    for col, ys in ((1, med_ms), (2, per_tok)):
        fig.add_trace(go.Scatter(x=x, y=ys, mode="lines+markers", name="median" if col == 1 else None,
                                 showlegend=col == 1, line={"color": PREFILL}, customdata=rate,
                                 hovertemplate="%{x} tokens: %{y:.2f} ms (%{customdata})<extra></extra>"),
                      row=1, col=col)
        if repeats > 1:
            dx = [t for t, r in zip(x, runs) for _ in r]
            dy = [v * 1000 / (t if col == 2 else 1) for t, r in zip(x, runs) for v in r]
            fig.add_trace(go.Scatter(x=dx, y=dy, mode="markers", name="single runs" if col == 1 else None,
                                     showlegend=col == 1, marker={"color": DECODE, "size": 5, "opacity": 0.6},
                                     hovertemplate="%{x} tokens: %{y:.2f} ms<extra></extra>"), row=1, col=col)
    each = "one run per point" if repeats == 1 else f"each point the median of {repeats} runs"
    layout(fig, f"Prefill vs prompt length (linear axes; {each})", "", "")
    fig.update_xaxes(title_text="prompt tokens", rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=HEIGHT + 40, margin={"t": 80}, showlegend=repeats > 1,
                      legend={"orientation": "h", "y": -0.3, "yanchor": "top", "x": 0.5, "xanchor": "center"})
    if empty:  # real axes, not Plotly's -1..6 default: no numbers on the time axes before a run
        fig.update_xaxes(range=[0, largest])
        fig.update_yaxes(showticklabels=False)
        fig.update_layout(title_text="Prefill vs prompt length (linear axes)")
        _hint(fig, SWEEP_HINT)
    return fig


def sweep_conclusion(res: dict) -> str:
    """The sweep's conclusion: where prefill stops being nearly free, and time per token."""
    x, per_tok = res["prompt_tokens"], res.get("ms_per_token") or []
    runs = res.get("runs_s") or [[]]
    repeats = max((len(r) for r in runs), default=1)
    each = "each point is one run, so expect some noise" if repeats == 1 else \
        f"each point is the median of {repeats} runs"
    line = (f"Prefill stayed within 2× the shortest prompt's time up to "
            f"<b>{fmt_int(res['cheap_until_tokens'])}</b> tokens")
    if per_tok and x:
        line += (f"; per prompt token it took {per_tok[0]:.2f} ms at {fmt_int(x[0])} tokens and "
                 f"{per_tok[-1]:.2f} ms at {fmt_int(x[-1])} ({fmt_rate(res['prefill_tokens_per_s'][-1])})")
    return f"{line} ({each})."


def run_sweep(engine, largest: int, repeats: int = 1, progress=None) -> tuple[go.Figure, str, dict]:
    """Prompt length sweep from 16 tokens up to ``largest`` (powers of two), ``repeats`` runs each.

    Returns:
        ``(figure, conclusion_html, result)``; the result feeds :func:`run_share`'s comparison.
    """
    lengths = [n for n in LENGTHS if n <= int(largest)]
    res = prompt_length.run(engine.experiment_model(), quick=True, progress=progress_adapter(progress), engine=engine,
                            lengths=lengths, repeats=max(1, min(5, int(repeats))))
    return sweep_figure(res), sweep_conclusion(res), res


def share_figure(res: dict | None) -> go.Figure:
    """One horizontal stacked bar: prefill and decode seconds, labelled with their shares;
    before a run (``res`` is ``None``) the empty bar's axes and a note on what to press."""
    fig = go.Figure()
    for key, share, name, color in (("prefill_s", "prefill_share", "prefill", PREFILL),
                                    ("decode_s", "decode_share", "decode", DECODE)):
        label = f"{name}: {fmt_seconds(res[key])} ({res[share] * 100:.1f}%)" if res else name
        fig.add_trace(go.Bar(y=["request"], x=[res[key] if res else None], orientation="h",
                             marker_color=color, name=label))
    title = (f"{res['prompt_tokens']} prompt tokens, {res['new_tokens']} new tokens" if res
             else "One request: prefill and decode time")
    layout(fig, title, "seconds", "")
    fig.update_layout(barmode="stack", height=220)
    if not res:
        fig.update_xaxes(range=[0, 1], showticklabels=False)
        _hint(fig, SHARE_HINT)
    return fig


def intensity(num_params: int, weights_bytes: int, tokens: int = 1) -> float:
    """Arithmetic intensity of a forward pass over ``tokens`` tokens, FLOPs per weight byte read:
    :meth:`engine.experiments.intensity.DecodeShape.intensity` with the KV cache left out (2 FLOPs
    per weight per token, the weights read once per pass; at batch 1 and short contexts the KV
    cache and activations are small beside the weights)."""
    if not weights_bytes:
        return 0.0
    shape = DecodeShape(params=num_params, weight_bytes=weights_bytes, kv_bytes_per_token=0,
                        layers=0, heads=0, head_dim=0)
    return shape.intensity(tokens, 0)


def memory_bound_html(info, prefill_tok_s: float, decode_tok_s: float, prompt_tokens: int,
                      where: str, gpu_from: tuple[str, int | None] | None = None) -> str:
    """Prefill and decode speed side by side, with the arithmetic intensity of each.

    Args:
        info: the engine's ``ModelInfo`` (``num_params``; ``weights_read_bytes``, the bytes a
            step reads, as the Memory-bound lesson's shape counts them).
        prefill_tok_s, decode_tok_s: measured speeds (tokens/s).
        prompt_tokens: the prompt length that prefill speed was measured at.
        where: where the prefill figure comes from (shown).
        gpu_from: ``(gpu name, prompt tokens)``: the prompt length from which this model's
            prefill reaches that GPU's ridge (``None``: no length does), said beside this
            CPU's verdict, since compute-bound is a property of the machine too.
    """
    # the bytes a step reads (a table kept only for the embedding lookup left out), as the
    # Memory-bound lesson's decode shape counts them: both lessons print one intensity
    params = int(info.num_params or 0)
    wbytes = int(getattr(info, "weights_read_bytes", 0) or info.weights_bytes or 0)
    ratio = f" (<b>{prefill_tok_s / decode_tok_s:.0f}×</b>)" if decode_tok_s > 0 else ""
    text = (f"<br>Side by side: prefill <b>{fmt_rate(prefill_tok_s)}</b> ({where}) against decode "
            f"<b>{fmt_rate(decode_tok_s)}</b>{ratio}. Decode is <b>memory-bound</b>: every step reads all "
            f"{fmt_bytes(wbytes)} of weights to make one token")
    if params and wbytes:
        text += (f", about 2 × {params / 1e6:.0f}M FLOPs, an <b>arithmetic intensity</b> of "
                 f"{intensity(params, wbytes):.1f} FLOP per byte, so memory <b>bandwidth</b> sets its "
                 f"speed. Prefill of {fmt_int(prompt_tokens)} tokens reuses each byte for every token: "
                 f"{intensity(params, wbytes, prompt_tokens):,.0f} FLOP per byte, so <b>on this "
                 "CPU</b>, whose ridge point (FLOP/s ÷ bandwidth, measured in the Memory-bound "
                 "lesson) is tens of FLOPs per byte at most, arithmetic limits it instead "
                 "(compute-bound here)")
        if gpu_from:
            gpu, n = gpu_from
            text += (f". A GPU's ridge is far higher: on an {html.escape(gpu)} this model's prefill "
                     + (f"turns compute-bound only from {fmt_int(n)} tokens" if n else
                        "stays memory-bound at any length")
                     + " (the Memory-bound lesson's prefill plot)")
    return text + "."


def gpu_prefill_from(engine) -> tuple[str, int | None] | None:
    """``(name, tokens)``: the prompt length from which the page's model's prefill reaches the
    Memory-bound lesson's reference GPU's ridge (its datasheet FLOP/s ÷ bandwidth), as that
    lesson's prefill plot computes it; ``None`` when the GPU or the model's shape is unknown."""
    from engine.experiments import intensity as decode_intensity

    from app.tabs.lessons import roofline_models as rm
    from app.tabs.lessons.roofline import REFERENCE_GPU, model_shape

    gpu = next((g for g in decode_intensity.published_ridges() if g["name"] == REFERENCE_GPU), None)
    try:
        shape = model_shape(engine)
    except (AttributeError, TypeError, ValueError):
        return None
    if gpu is None:
        return None
    return gpu["name"], rm.prefill_crossover(shape, gpu["ridge"])


def run_share(engine, new_tokens: int, progress=None, sweep: dict | None = None) -> tuple[go.Figure, str]:
    """Decode share of one request with ``new_tokens`` new tokens, and the memory-bound comparison
    (prefill speed from ``sweep``'s longest prompt when a sweep has run, else from this request)."""
    res = decode_share.run(engine.experiment_model(), quick=True, progress=progress_adapter(progress), engine=engine,
                           new_tokens=int(new_tokens))
    decode_rate = 1.0 / res["tpot_s"] if res["tpot_s"] > 0 else 0.0
    if sweep and sweep.get("prefill_tokens_per_s"):
        pre, n, where = sweep["prefill_tokens_per_s"][-1], sweep["prompt_tokens"][-1], \
            f"the sweep's {fmt_int(sweep['prompt_tokens'][-1])}-token prompt"
    else:
        n = res["prompt_tokens"]
        pre = n / res["prefill_s"] if res["prefill_s"] > 0 else 0.0
        where = f"this request's {fmt_int(n)}-token prompt; run the sweep for longer ones"
    from app.tabs.lessons.batch import batch1_tpot_note

    msg = (f"Decode took <b>{res['decode_share'] * 100:.1f}%</b> of prefill + decode; one decode step "
           f"(TPOT) took {fmt_seconds(res['tpot_s'])}."
           + batch1_tpot_note(res["tpot_s"] * 1000, int(new_tokens))
           + memory_bound_html(engine.info, pre, decode_rate, n, where, gpu_prefill_from(engine)))
    return share_figure(res), msg



LATENCY_TEXT = (
    "### Latency against prompt length\n\n"
    "The same answer length N for every prompt, prompts of 64 to 1,024 tokens, each unique and with "
    "a prefix-cache salt of its own (so nothing is shared: the run shows the cache hits, 0). "
    "**TTFT** grows with the prompt, since prefill computes every prompt token. **TPOT** grows too, "
    "more gently: every decode step reads the whole KV cache and attends over every cached token, "
    "so a longer context makes each step slower. The **total** is TTFT + TPOT × (N − 1). "
    f"A run stops adding rounds before it would pass {prompt_latency.BUDGET_S:.0f} s.")
LATENCY_ROUNDS = (1, 3)
LATENCY_TOKENS = (8, 16, 32)
TTFT_COLOR, TOTAL_COLOR, TPOT_COLOR = PREFILL, "#555555", DECODE


def run_latency(engine, new_tokens, rounds, progress=None, lengths=prompt_latency.LENGTHS,
                budget_s: float = prompt_latency.BUDGET_S) -> dict:
    """:func:`engine.experiments.prompt_latency.run` on the page's engine as lesson requests.

    Args:
        new_tokens: N, one of :data:`LATENCY_TOKENS`; rounds: one of :data:`LATENCY_ROUNDS`.
        lengths: the prompt lengths (tokens); budget_s: no round starts that would likely end
            past this many seconds (the first always runs).

    Raises:
        ValueError: N or the rounds not among the offered values (the message names the field).
    """
    n = fields.whole("new tokens", new_tokens)
    if n not in LATENCY_TOKENS:
        raise ValueError(f"new tokens must be one of {', '.join(map(str, LATENCY_TOKENS))}, got {n}")
    r = fields.whole("rounds", rounds)
    if r not in LATENCY_ROUNDS:
        raise ValueError(f"rounds must be one of {', '.join(map(str, LATENCY_ROUNDS))}, got {r}")
    return prompt_latency.run(LessonEngine(engine, "prefill"), engine.experiment_model().tokenizer,
                              lengths, n, r, progress_adapter(progress), budget_s)


def latency_figure(res: dict | None) -> go.Figure:
    """TTFT and total time (ms, left) and TPOT (ms, right) against prompt tokens, linear axes;
    an empty pair of axes with a hint before a run."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("TTFT and total time (ms)", "TPOT (ms per token after the first)"))
    rows = (res or {}).get("rows", [])
    x = [r["prompt_tokens"] for r in rows]
    for key, name, color, col in (("ttft_s", "TTFT", TTFT_COLOR, 1), ("total_s", "total", TOTAL_COLOR, 1),
                                  ("tpot_s", "TPOT", TPOT_COLOR, 2)):
        fig.add_trace(go.Scatter(x=x, y=[r[key] * 1000 for r in rows], mode="lines+markers", name=name,
                                 line={"color": color, "width": 2},
                                 hovertemplate=f"%{{x}} prompt tokens: {name} %{{y:.1f}} ms<extra></extra>"),
                      row=1, col=col)
    title = "Latency vs prompt length"
    if res:
        title += f" ({res['new_tokens']} new tokens each; " + (
            "one run per point)" if res["repeats"] == 1 else f"each point the run with the median total of {res['repeats']})")
    else:
        fig.add_annotation(text="Press “Run latency vs prompt length”", xref="paper", yref="paper", x=0.5, y=0.5,
                           showarrow=False, font={"size": 14, "color": "#888"})
    layout(fig, title, "", "")
    fig.update_xaxes(title_text="prompt tokens", rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=HEIGHT + 60, margin={"t": 80, "b": 90},  # the legend below, clear of the titles
                      legend={"orientation": "h", "y": -0.3, "yanchor": "top", "x": 0.5, "xanchor": "center"})
    return fig


def _shown(r: dict) -> tuple[float, float, float]:
    """TTFT (ms, 1 decimal), TPOT (ms, 2 decimals) and total (ms, 1 decimal) as the table prints them."""
    return round(r["ttft_s"] * 1000, 1), round(r["tpot_s"] * 1000, 2), round(r["total_s"] * 1000, 1)


def latency_table(res: dict, kv_bytes_per_token: int, weight_bytes: int) -> str:
    """HTML: per prompt length its TTFT, TPOT, measured total, the equation
    TTFT + TPOT × (N − 1) on the printed figures, and the prefix cache's hits; then how TTFT and
    TPOT grew and the KV cache bytes a decode step reads at the longest prompt
    (``kv_bytes_per_token`` × prompt tokens, beside ``weight_bytes``)."""
    rows = res["rows"]
    head = ("<table class='lesson-table'><tr><th>prompt tokens</th><th>TTFT</th><th>TPOT</th>"
            "<th>total (measured)</th><th>TTFT + TPOT × (N − 1)</th><th>prefix cache hits</th></tr>")
    body = []
    for r in rows:
        ttft, tpot, total = _shown(r)
        n1 = r["output_tokens"] - 1
        # in hundredths of a ms, so the sum is exact: no rounding between the figures and the result
        exact = round(ttft * 100) + round(tpot * 100) * n1
        body.append(f"<tr><td>{fmt_int(r['prompt_tokens'])}</td><td>{ttft:,.1f} ms</td><td>{tpot:,.2f} ms</td>"
                    f"<td>{total:,.1f} ms</td><td>{ttft:,.1f} + {tpot:,.2f} × {n1} = "
                    f"{exact // 100:,}.{exact % 100:02d} ms</td>"
                    f"<td>{fmt_int(r['cached_prompt_tokens'])} tokens</td></tr>")
    first, last = rows[0], rows[-1]
    (t0, p0, _), (t1, p1, _) = _shown(first), _shown(last)
    kv = last["prompt_tokens"] * kv_bytes_per_token
    each = ("one run per length" if res["repeats"] == 1 else
            f"each row the run with the median total of {res['repeats']} rounds, the lengths taking turns")
    asked = res.get("asked_repeats", res["repeats"])
    if asked > res["repeats"]:
        each += (f" ({asked} rounds asked; the rest would have run past "
                 f"{prompt_latency.BUDGET_S:.0f} s on this busy machine)")
    text = (f"From {fmt_int(first['prompt_tokens'])} to {fmt_int(last['prompt_tokens'])} prompt tokens, "
            f"<b>TTFT</b> went from {t0:,.1f} ms to {t1:,.1f} ms ({t1 / t0 if t0 else 0:.1f}×) and "
            f"<b>TPOT</b> from {p0:,.2f} ms to {p1:,.2f} ms ({p1 / p0 if p0 else 0:.2f}×). TPOT grows with the "
            f"context because each decode step reads the whole KV cache: at {fmt_int(last['prompt_tokens'])} "
            f"tokens {fmt_int(last['prompt_tokens'])} × {fmt_int(kv_bytes_per_token)} B = {fmt_bytes(kv)} of it "
            f"besides {fmt_bytes(weight_bytes)} of weights, and attends over every one of those tokens"
            + ("" if p1 > p0 else " (this run's noise hid the growth: a busy machine's steps vary more than "
                                  "that; try again with 3 rounds)") + ". "
            "The last column is the latency formula on the printed figures; the measured total differs "
            "from it only by their rounding.")
    note = (f"<span class='lesson-note'>{res['new_tokens']} new tokens per request (greedy, the end-of-text "
            f"token ignored), raw prompts, {each}; the prefix cache served "
            f"{fmt_int(sum(r['cached_prompt_tokens'] for r in rows))} tokens in all.</span>")
    return f"<div class='lesson-result'>{head}{''.join(body)}</table>{text}<br>{note}</div>"


def _latency_section(engine, c: dict) -> None:
    """The latency-against-prompt-length section: words, settings, the button, figure and table."""
    import gradio as gr

    from app.server.errors import guard
    from app.tabs.lessons.gate import gated
    from app.tabs.lessons.common import elem, running_html
    from app.tabs.lessons.roofline import model_shape

    gr.Markdown(LATENCY_TEXT)
    with gr.Row():
        c["lat_sweep_tokens"] = gr.Dropdown(list(LATENCY_TOKENS), value=16, label="new tokens N (every prompt)",
                                            **elem("lat_sweep_tokens"))
        c["lat_sweep_rounds"] = gr.Dropdown(list(LATENCY_ROUNDS), value=3, label="rounds (median)",
                                            **elem("lat_sweep_rounds"))
        c["lat_sweep_run"] = gr.Button("Run latency vs prompt length", variant="primary", **elem("lat_sweep_run"))
    c["lat_sweep_plot"] = gr.Plot(latency_figure(None), show_label=False, **elem("lat_sweep_plot"))
    c["lat_sweep_status"] = gr.HTML("", **elem("lat_sweep_status"))
    shape = model_shape(engine)

    def on_run(n, rounds, progress=gr.Progress()):
        try:
            res = run_latency(engine, n, rounds, progress)
        except ValueError as exc:
            raise gr.Error(str(exc), print_exception=False) from None
        return latency_figure(res), latency_table(res, shape.kv_bytes_per_token, shape.weight_bytes)

    c["lat_sweep_run"].click(guard(lambda: running_html("latency sweep")), None, c["lat_sweep_status"],
                             queue=False, api_visibility="private").then(
        guard(gated(on_run, "latency sweep")), [c["lat_sweep_tokens"], c["lat_sweep_rounds"]], [c["lat_sweep_plot"], c["lat_sweep_status"]],
        show_progress_on=[c["lat_sweep_plot"]], concurrency_limit=None,
        api_visibility="private")


def _latency_calculator(c: dict) -> None:
    """The latency calculator (:mod:`app.render.latency`): TTFT, TPOT and N in, the equation out,
    redrawn on every change. Starts at a worked example, 200 ms + 40 ms × 199."""
    import gradio as gr

    from app.render.latency import latency_calc_html
    from app.server.errors import guard
    from app.tabs.lessons.common import elem

    with gr.Accordion("Latency calculator: latency = TTFT + TPOT × (N − 1)", open=True):
        with gr.Row():
            c["lat_ttft"] = gr.Number(200, label="TTFT (ms)", **elem("lat_ttft"))
            c["lat_tpot"] = gr.Number(40, label="TPOT (ms)", **elem("lat_tpot"))
            c["lat_n"] = gr.Number(200, precision=0, label="output tokens N", **elem("lat_n"))
        c["lat_out"] = gr.HTML(latency_calc_html(200, 40, 200), **elem("lat_out"))
    ins = [c["lat_ttft"], c["lat_tpot"], c["lat_n"]]
    gr.on([i.change for i in ins], guard(latency_calc_html), ins, c["lat_out"], show_progress="hidden",
          queue=False, api_visibility="private")


SWEEP_LONGEST = (256, 512, 1024, 2048)
"""The sweep's longest prompt choices, in tokens."""
SWEEP_REPEATS = (1, 2, 3)
"""The sweep's runs per length."""
SHARE_TOKENS = range(20, 501)
"""The decode share's new-token counts (its slider's range)."""


def build(ctx) -> dict:
    """The lesson inside an open ``gr.Tab``: the sweep's and the decode share's settings,
    buttons, figures and conclusions, wired to ``ctx.engine``. Returns the components by name."""
    import gradio as gr

    from app.server.errors import guard
    from app.tabs.lessons.common import choice_input, elem, running_html
    from app.tabs.lessons.gate import gated

    engine, c = ctx.engine, {}
    gr.Markdown(TEXT)
    with gr.Row():
        c["sweep_max"] = gr.Dropdown(list(SWEEP_LONGEST), value=1024,
                                     label="longest prompt (tokens)", **elem("sweep_max"))
        c["sweep_repeats"] = gr.Dropdown(list(SWEEP_REPEATS), value=1, label="runs per length (median)",
                                         **elem("sweep_repeats"))
        c["sweep_run"] = gr.Button("Run prompt length sweep", variant="primary", **elem("sweep_run"))
        c["share_tokens"] = gr.Slider(20, 500, value=100, step=10, label="new tokens",
                                      **elem("share_tokens"))
        c["share_run"] = gr.Button("Run decode share", variant="primary", **elem("share_run"))
    with gr.Row(equal_height=False):
        with gr.Column():
            c["sweep_plot"] = gr.Plot(sweep_figure(None), show_label=False, **elem("sweep_plot"))
            c["sweep_status"] = gr.HTML("", **elem("sweep_status"))
        with gr.Column():
            c["share_plot"] = gr.Plot(share_figure(None), show_label=False, **elem("share_plot"))
            c["share_status"] = gr.HTML("", **elem("share_status"))
    c["sweep_result"] = gr.State(None)
    _latency_calculator(c)
    _latency_section(engine, c)

    def on_sweep(largest, repeats, progress=gr.Progress()):
        largest = choice_input("longest prompt (tokens)", largest, SWEEP_LONGEST)
        repeats = choice_input("runs per length", repeats, SWEEP_REPEATS)
        return run_sweep(engine, largest, repeats, progress)

    def on_share(n, sweep, progress=gr.Progress()):
        n = choice_input("new tokens", n, SHARE_TOKENS)
        return run_share(engine, n, progress, sweep if isinstance(sweep, dict) else None)

    run = dict(concurrency_limit=None, api_visibility="private")  # the gate decides
    # the old conclusion goes first, so it never sits beside the next run's progress text
    c["sweep_run"].click(guard(lambda: running_html("sweep")), None, c["sweep_status"], queue=False,
                         api_visibility="private").then(
        guard(gated(on_sweep, "prompt length sweep")), [c["sweep_max"], c["sweep_repeats"]],
        [c["sweep_plot"], c["sweep_status"], c["sweep_result"]], show_progress_on=[c["sweep_plot"]], **run)
    c["share_run"].click(guard(lambda: running_html("decode share")), None, c["share_status"],
                         queue=False, api_visibility="private").then(
        guard(gated(on_share, "decode share")), [c["share_tokens"], c["sweep_result"]], [c["share_plot"], c["share_status"]],
        show_progress_on=[c["share_plot"]], **run)
    return c
