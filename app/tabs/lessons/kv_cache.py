"""Lesson: KV cache on against off, live. The same prompt runs twice through the page's engine
(greedy, EOS ignored), with the cache and then recomputing the whole sequence every step; the
figure draws each decode step's time as it arrives. No torch here.
"""

from __future__ import annotations

import html
from typing import Iterator

import gradio as gr
import plotly.graph_objects as go

from engine import QueueFullError, SamplingParams
from engine.experiments.common import first_mismatch

from app.render.figures import _hint
from app.render.fmt import fmt_seconds
from app.server.errors import guard
from app.tabs.lessons.gate import gated
from app.tabs.lessons.common import OFF, ON, elem, error_html as _error, layout as _layout

TITLE = "KV cache on vs off"
TEXT = (
    "The same prompt runs twice, greedy, first with the KV cache and then without it. With the "
    "cache each step feeds one new token, so the blue line stays flat. Without it every step "
    "recomputes the whole sequence, so the orange line climbs as the answer grows: compare the "
    "total times. The two runs compute the same mathematics but not the same arithmetic: the "
    "cached step multiplies one new row against the stored keys, the recompute runs a full causal "
    "prefill with other kernels and another summation order, so bf16 and int4 round differently. "
    "Where two candidate tokens are nearly tied, greedy can pick differently, and from that token "
    "on the answers part. The result line says whether they did, and at which token.")


def kv_live_figure(on_ms: list[float], off_ms: list[float], new_tokens: int = 0) -> go.Figure:
    """Decode step latency (ms) against the output token, KV cache on and off."""
    fig = go.Figure()
    for ys, name, color in ((on_ms, "KV cache on", ON), (off_ms, "KV cache off (recompute)", OFF)):
        fig.add_trace(go.Scatter(x=list(range(1, len(ys) + 1)), y=ys, name=name, mode="lines+markers",
                                 line={"color": color, "width": 2}, marker={"size": 4},
                                 hovertemplate="token %{x}: %{y:.1f} ms<extra></extra>"))
    _layout(fig, "Latency per decode step", "output token", "step time (ms)")
    fig.update_yaxes(rangemode="tozero")
    if new_tokens:
        fig.update_xaxes(range=[0, new_tokens + 1])
    if not on_ms and not off_ms:  # before the first run: real axes, not Plotly's -1..6 default
        fig.update_xaxes(range=[0, (new_tokens or 64) + 1])
        fig.update_yaxes(range=[0, 100])
        _hint(fig, "Run the two requests to draw their step times")
    return fig


def _ms(events) -> list[float]:
    return [e.duration_s * 1000 for e in list(events) if e.phase == "decode"]


def kv_live(engine, prompt: str, new_tokens: int, poll_s: float = 0.25,
            submit_kwargs: dict | None = None) -> Iterator[tuple]:
    """Run ``prompt`` with the cache on, then off, through the engine queue (greedy, EOS ignored).

    The runs go one after the other, so neither shares its steps with the other (other users'
    requests still may: the engine batches whatever is running). ``submit_kwargs`` go to
    ``engine.submit`` (the session's ``cache_salt``).

    Yields:
        ``(figure, status_html)`` every ``poll_s`` seconds while a run is going, and once more
        at the end with the total times and their ratio. Leaving early aborts the runs.
    """
    new_tokens = int(new_tokens)
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    runs: list = []
    try:
        for use in (True, False):
            try:
                runs.append(engine.submit(prompt, params, use_kv_cache=use, source="lesson",
                                          **(submit_kwargs or {})))
            except (ValueError, QueueFullError) as exc:  # a bad prompt or a full queue is shown
                yield kv_live_figure(*_curves(runs), new_tokens), _error(str(exc))
                return
            while not runs[-1].finished:
                label = "on" if use else "off (recomputing every step)"
                yield (kv_live_figure(*_curves(runs), new_tokens),
                       f"KV cache {label}: {len(runs[-1].events)}/{new_tokens} tokens")
                _wait(runs[-1], poll_s)
    finally:
        for h in runs:
            h.close()
    yield from _kv_final(runs[0], runs[1], new_tokens, engine.detokenize)


def _curves(runs: list) -> tuple[list[float], list[float]]:
    ms = [_ms(h.events) for h in runs] + [[], []]
    return ms[0], ms[1]


def _wait(handle, seconds: float) -> None:
    try:
        handle.result(timeout=seconds)
    except TimeoutError:
        pass


def _kv_final(on, off, new_tokens: int, detokenize=None) -> Iterator[tuple]:
    a, b = _ms(on.events), _ms(off.events)
    if not (on.output and off.output and on.output.finished_ok and off.output.finished_ok):
        bad = on.output if not (on.output and on.output.finished_ok) else off.output
        reason = bad.error or bad.finish_reason if bad else "stopped"
        yield kv_live_figure(a, b, new_tokens), _error(f"a run ended early: {reason}")
        return
    m_on, m_off = on.output.metrics, off.output.metrics  # queue time left out
    t_on, t_off = m_on.e2e_s - m_on.queue_time_s, m_off.e2e_s - m_off.queue_time_s
    yield kv_live_figure(a, b, new_tokens), (
        f"Total time: on <b>{fmt_seconds(t_on)}</b>, off <b>{fmt_seconds(t_off)}</b> "
        f"(<b>{t_off / t_on:.1f}×</b> slower without the cache); "
        + divergence_note(on.output.token_ids, off.output.token_ids, detokenize))


def divergence_note(on_ids: list[int], off_ids: list[int], detokenize=None) -> str:
    """One sentence comparing the cached and the recomputed answers: "the same N tokens", or the
    first output token (1-based) where they part, with the token each run chose there.

    ``detokenize(ids) -> str`` names the tokens when given. The cause of a split is numerical
    (different kernels and reduction order round differently in bf16/int4), so the sentence says so.
    """
    i = first_mismatch(on_ids, off_ids)
    if i is None:
        return f"both runs produced the same {len(on_ids)} tokens."
    if i >= min(len(on_ids), len(off_ids)):
        return f"the runs agree for {i} tokens, then one of them stops."

    def name(tid):
        return f"“{html.escape(detokenize([tid]))}”" if detokenize else f"id {tid}"

    return (f"the runs agree for {i} tokens and part at output token <b>{i + 1}</b>: cached chose "
            f"{name(on_ids[i])}, recompute chose {name(off_ids[i])}. Not a bug in either: the two "
            "paths use different kernels and summation orders, so their logits differ in the last "
            "bits, and at a near-tie greedy picks differently; every later token follows from it.")


def build(ctx) -> dict:
    """The lesson inside an open ``gr.Tab``: the prompt, the answer length, the run button, the
    live figure and the status line, wired to ``ctx.engine`` (with the session's
    ``ctx.session_kwargs``). Returns the components by name."""
    engine, session_kwargs = ctx.engine, ctx.session_kwargs
    c: dict = {}
    gr.Markdown(TEXT)
    with gr.Row():
        c["kv_prompt"] = gr.Textbox("Tell me a story about a robot who learns to paint.",
                                    label="Prompt", scale=4, **elem("kv_prompt"))
        c["kv_tokens"] = gr.Slider(16, 192, value=64, step=16, label="new tokens", scale=2,
                                   **elem("kv_tokens"))
        c["kv_run"] = gr.Button("Run both", variant="primary", scale=1, **elem("kv_run"))
    c["kv_plot"] = gr.Plot(kv_live_figure([], []), show_label=False, **elem("kv_plot"))
    c["kv_status"] = gr.HTML("", **elem("kv_status"))

    def on_kv(prompt, n, request: gr.Request):
        yield from kv_live(engine, prompt, n, submit_kwargs=session_kwargs(request.session_hash))

    c["kv_run"].click(guard(gated(on_kv, "KV cache")), [c["kv_prompt"], c["kv_tokens"]], [c["kv_plot"], c["kv_status"]],
                      show_progress="hidden", concurrency_limit=None, api_visibility="private")
    return c
