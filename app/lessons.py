"""The Lessons tab: eight small experiments for a classroom, on the page's own engine.

(a) KV cache on against off, live; (b) prompt length sweep and decode share on demand
(:mod:`app.lesson_prefill`); (c) the KV cache calculator against common GPUs
(:mod:`app.lesson_calculator`); (d) the sampling explorer (:mod:`app.lesson_sampling`); (e)
quantization: every weights and KV cache precision side by side (each variant loaded briefly,
apart from the engine that serves the page); (f) batch size (:mod:`app.lesson_batch`); (g)
memory-bound or compute-bound (:mod:`app.lesson_roofline`); (h) speculative decoding
(:mod:`app.spec_lesson`). The work that needs torch lives in
``engine.experiments``; here are the layout, the wiring and the (a) and (e) handlers, plain
functions testable without a browser. Every lesson run is submitted with ``source="lesson"``,
so it stays out of the users' latency percentiles. This module never imports torch.
"""

from __future__ import annotations

from typing import Iterator

import gradio as gr
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine import QueueFullError, SamplingParams
from engine.experiments import calculator, explorer, quantization  # noqa: F401 (calculator: tests patch it)
from engine.telemetry.estimator import DTYPE_BYTES, known_models

from . import lesson_batch, lesson_roofline
from .errors import guard
from .figures import _hint
from .fmt import fmt_bytes, fmt_int, fmt_seconds
from .lesson_calculator import (ACTIVATIONS, DEFAULTS, MAX_CONFIG_BYTES, NUMBERS, UNCHUNKED,  # noqa: F401
                                calculator_figure, calculator_table, calculator_update,
                                calculator_view, read_config)
from .lesson_common import OFF, ON, error_html as _error, layout as _layout, progress_adapter
from .lesson_prefill import run_share, run_sweep, share_figure, sweep_figure  # noqa: F401
from .lesson_sampling import (EXAMPLES, PENALTY_RULE, USE_CASES, answer_html, explorer_figure,  # noqa: F401
                              explorer_generate, show_token, step_choices)
from . import lesson_calculator, lesson_prefill, lesson_sampling
from .spec_lesson import build_spec_lesson

TEXT = {
    "kv": "The same prompt runs twice, first with the KV cache and then without it; both runs "
          "produce the same tokens. With the cache each step feeds one new token, so the blue "
          "line stays flat. Without it every step recomputes the whole sequence, so the orange "
          "line climbs as the answer grows: compare the total times.",
    "prefill": lesson_prefill.TEXT,
    "calc": lesson_calculator.TEXT,
    "sampling": lesson_sampling.TEXT,
    "quant": "Each precision is loaded for a moment and scored on a fixed text (English, Chinese "
             "and code) against fp32: how often its most likely next token agrees, and how far its "
             "next-token distribution moves (KL). When the weights dominate memory and time, as "
             "in batch-1 decode, quantize the weights; when the KV cache dominates (long contexts, "
             "many users), quantize or page the KV cache; when activations dominate (long "
             "prefills), use memory-efficient attention. A run takes a minute or two.",
}


# ---- (a) KV cache on vs off, live --------------------------------------------------------------
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
    yield from _kv_final(runs[0], runs[1], new_tokens)


def _curves(runs: list) -> tuple[list[float], list[float]]:
    ms = [_ms(h.events) for h in runs] + [[], []]
    return ms[0], ms[1]


def _wait(handle, seconds: float) -> None:
    try:
        handle.result(timeout=seconds)
    except TimeoutError:
        pass


def _kv_final(on, off, new_tokens: int) -> Iterator[tuple]:
    a, b = _ms(on.events), _ms(off.events)
    if not (on.output and off.output and on.output.finished_ok and off.output.finished_ok):
        bad = on.output if not (on.output and on.output.finished_ok) else off.output
        reason = bad.error or bad.finish_reason if bad else "stopped"
        yield kv_live_figure(a, b, new_tokens), _error(f"a run ended early: {reason}")
        return
    m_on, m_off = on.output.metrics, off.output.metrics  # queue time left out
    t_on, t_off = m_on.e2e_s - m_on.queue_time_s, m_off.e2e_s - m_off.queue_time_s
    same = "the same tokens" if on.output.token_ids == off.output.token_ids else "different tokens"
    yield kv_live_figure(a, b, new_tokens), (
        f"Total time: on <b>{fmt_seconds(t_on)}</b>, off <b>{fmt_seconds(t_off)}</b> "
        f"(<b>{t_off / t_on:.1f}×</b> slower without the cache); both runs produced {same}.")


# ---- (e) quantization ----------------------------------------------------------------------------
def quant_figure(res: dict) -> go.Figure:
    """Per variant: weight MB, decode tokens/s (× fp32) and top-1 agreement with fp32 (%)."""
    rows = res.get("rows", [])
    names = [r["label"].replace(" weights", "") for r in rows]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("weights (MB)", "decode tok/s, × fp32",
                                                        "top-1 agreement with fp32 (%)"))
    for col, (vals, color) in enumerate((([r["weights_bytes"] / 1e6 for r in rows], ON),
                                         ([r["decode_tokens_per_s_vs_fp32"] for r in rows], OFF),
                                         ([r["top1_agreement"] * 100 for r in rows], "#F3A712")), 1):
        fig.add_trace(go.Bar(x=names, y=vals, marker_color=color, showlegend=False), row=1, col=col)
    _layout(fig, "Precision: memory, speed and agreement with fp32", "", "")
    fig.update_yaxes(range=[80, 100], row=1, col=3)
    return fig


def quant_table(res: dict) -> str:
    """Markdown table: one row per variant with every measured figure."""
    lines = ["| precision | perplexity | top-1 vs fp32 | KL (nats) | weights | KV per token | "
             "decode b1 | prefill | batch |", "|" + " --- |" * 9]
    for r in res.get("rows", []):
        lines.append(
            f"| {r['label']} | {r['perplexity']:.2f} | {r['top1_agreement'] * 100:.1f}% | "
            f"{r['kl_mean']:.4f} | {fmt_bytes(r['weights_bytes'])} | {fmt_int(r['kv_bytes_per_token'])} B | "
            f"{r['decode_tokens_per_s']:.1f} tok/s ({r['decode_tokens_per_s_vs_fp32']:.2f}×) | "
            f"{r['prefill_tokens_per_s']:.0f} tok/s | {r['batch_tokens_per_s']:.0f} tok/s |")
    p = res.get("params", {})
    lines.append(f"\nText: {p.get('text_tokens_actual')} tokens; prefill "
                 f"{p.get('prefill_tokens_actual', p.get('prefill_tokens'))} tokens; batch "
                 f"{p.get('batch')} × {p.get('batch_tokens')} new tokens; one quick round, so "
                 "speeds move with the machine's load (`python -m engine bench quantization` "
                 "runs the full sizes).")
    return "\n".join(lines)


def run_quantization(engine, progress=None) -> tuple[go.Figure, str]:
    """The ``quantization`` experiment in quick mode on the page's model (its own engines)."""
    res = quantization.run(engine.loaded, quick=True, progress=progress_adapter(progress))
    return quant_figure(res), quant_table(res)


# ---- layout and wiring -------------------------------------------------------------------------
def build_lessons(engine, session_kwargs=None) -> dict:
    """Build the Lessons tab's content inside an open ``gr.Blocks``/``gr.Tab`` context.

    Args:
        engine: the running ``LLMEngine`` (its queue runs every model call but the explorer's
            one-pass step recomputation).
        session_kwargs: ``(session id) -> dict`` of extra ``engine.submit`` arguments for a
            user's own prompts (``Playground.engine_kwargs``: the session's ``cache_salt``).

    Returns:
        The main components by name (for tests and further wiring).
    """
    c: dict = {}

    def ids(key: str) -> dict:
        return {"elem_id": "lesson-" + key.replace("_", "-")}

    with gr.Tabs():
        with gr.Tab("KV cache on vs off"):
            gr.Markdown(TEXT["kv"])
            with gr.Row():
                c["kv_prompt"] = gr.Textbox("Tell me a story about a robot who learns to paint.",
                                            label="Prompt", scale=4, **ids("kv_prompt"))
                c["kv_tokens"] = gr.Slider(16, 192, value=64, step=16, label="new tokens", scale=2,
                                           **ids("kv_tokens"))
                c["kv_run"] = gr.Button("Run both", variant="primary", scale=1, **ids("kv_run"))
            c["kv_plot"] = gr.Plot(kv_live_figure([], []), show_label=False, **ids("kv_plot"))
            c["kv_status"] = gr.HTML("", **ids("kv_status"))
        with gr.Tab("Prefill and decode"):
            gr.Markdown(TEXT["prefill"])
            with gr.Row():
                c["sweep_max"] = gr.Dropdown([256, 512, 1024, 2048], value=1024,
                                             label="longest prompt (tokens)", **ids("sweep_max"))
                c["sweep_repeats"] = gr.Dropdown([1, 2, 3], value=1, label="runs per length (median)",
                                                 **ids("sweep_repeats"))
                c["sweep_run"] = gr.Button("Run prompt length sweep", variant="primary",
                                           **ids("sweep_run"))
                c["share_tokens"] = gr.Slider(20, 500, value=100, step=10, label="new tokens",
                                              **ids("share_tokens"))
                c["share_run"] = gr.Button("Run decode share", variant="primary", **ids("share_run"))
            with gr.Row(equal_height=False):
                with gr.Column():
                    c["sweep_plot"] = gr.Plot(show_label=False, **ids("sweep_plot"))
                    c["sweep_status"] = gr.HTML("", **ids("sweep_status"))
                with gr.Column():
                    c["share_plot"] = gr.Plot(show_label=False, **ids("share_plot"))
                    c["share_status"] = gr.HTML("", **ids("share_status"))
            c["sweep_result"] = gr.State(None)
        with gr.Tab("KV cache calculator"):
            gr.Markdown(TEXT["calc"])
            models = known_models()
            first = models[0] if models else ""
            d = DEFAULTS
            with gr.Row():
                c["calc_model"] = gr.Dropdown(models, value=first or None, label="model", scale=2,
                                              **ids("calc_model"))
                c["calc_seq"] = gr.Number(d["seq_len"], precision=0, label="sequence length (tokens, ≥ 1)",
                                          **ids("calc_seq"))
                c["calc_batch"] = gr.Number(d["batch"], precision=0, label="batch (requests)", **ids("calc_batch"))
                c["calc_dtype"] = gr.Dropdown(list(DTYPE_BYTES), value="fp16", label="weights dtype",
                                              **ids("calc_dtype"))
                c["calc_kv_dtype"] = gr.Dropdown(list(DTYPE_BYTES), value="fp16", label="KV cache dtype",
                                                 **ids("calc_kv_dtype"))
            with gr.Row():
                c["calc_act"] = gr.Radio(list(ACTIVATIONS), value=UNCHUNKED, label="activations: prefill as",
                                         scale=2, **ids("calc_act"))
                c["calc_chunk"] = gr.Number(d["chunk_tokens"], precision=0, label="chunk (tokens per pass)",
                                            **ids("calc_chunk"))
                c["calc_overhead"] = gr.Number(d["overhead_gb"], label="framework overhead (GB)",
                                               **ids("calc_overhead"))
                c["calc_samples"] = gr.Number(d["samples"], precision=0, label="answers per request (beams)",
                                              **ids("calc_samples"))
                c["calc_prompt"] = gr.Number(d["prompt_tokens"], precision=0, label="of which prompt tokens",
                                             **ids("calc_prompt"))
                c["calc_share"] = gr.Checkbox(True, label="block sharing (prompt stored once)",
                                              **ids("calc_share"))
            with gr.Accordion("Or your own model: its config.json", open=False):
                with gr.Row():
                    c["calc_json"] = gr.Textbox(label="paste config.json", lines=3, max_lines=12,
                                                placeholder='{"num_hidden_layers": 32, "hidden_size": 4096, ...}',
                                                **ids("calc_json"))
                    c["calc_file"] = gr.State(None)  # uploads are off (app.file_routes): paste it
            c["calc_status"] = gr.HTML("", **ids("calc_status"))
            fig, table = calculator_view(first, "", None, d["seq_len"], d["batch"], "fp16", "fp16", UNCHUNKED,
                                         d["chunk_tokens"], d["overhead_gb"], d["samples"], d["prompt_tokens"])
            c["calc_plot"] = gr.Plot(fig, show_label=False, **ids("calc_plot"))
            c["calc_table"] = gr.Markdown(table, **ids("calc_table"))
            c["calc_last"] = gr.State(dict(DEFAULTS))
        with gr.Tab("Sampling explorer"):
            gr.Markdown(TEXT["sampling"] + "\n\n" + USE_CASES)
            with gr.Row():
                c["ex_prompt"] = gr.Textbox("Name a colour and say why you like it.", label="Prompt",
                                            scale=4, **ids("ex_prompt"))
                c["ex_seed"] = gr.Number(0, precision=0, label="seed", scale=1, **ids("ex_seed"))
                c["ex_run"] = gr.Button("Generate an answer", variant="primary", scale=1,
                                        **ids("ex_run"))
            with gr.Row():
                c["ex_temp"] = gr.Slider(0, 2, value=0.8, step=0.05, label="temperature (0 = greedy)",
                                         **ids("ex_temp"))
                c["ex_topk"] = gr.Slider(0, 50, value=0, step=1, label="top-k (0 = off)", **ids("ex_topk"))
                c["ex_topp"] = gr.Slider(0.05, 1, value=1.0, step=0.01, label="top-p (1 = off)",
                                         **ids("ex_topp"))
                c["ex_minp"] = gr.Slider(0, 0.5, value=0.0, step=0.01, label="min-p (0 = off)",
                                         **ids("ex_minp"))
                c["ex_rep"] = gr.Slider(0.8, 2.0, value=1.0, step=0.05, label="repetition penalty (1 = off)",
                                        **ids("ex_rep"))
            sliders = [c["ex_temp"], c["ex_topk"], c["ex_topp"], c["ex_minp"], c["ex_rep"]]
            gr.Examples([list(ex[1:]) for ex in EXAMPLES], [c["ex_prompt"], *sliders],
                        example_labels=[ex[0] for ex in EXAMPLES], label="Use cases: greedy or sampling")
            gr.Markdown(PENALTY_RULE, elem_classes=["penalty-rule"])
            c["ex_answer"] = gr.HTML(answer_html(None), **ids("ex_answer"))
            c["ex_step"] = gr.Dropdown([], label="step of the answer (index: token)", interactive=True,
                                       **ids("ex_step"))
            c["ex_plot"] = gr.Plot(explorer_figure(None, 1, 0, 1, 0), show_label=False, **ids("ex_plot"))
            c["ex_answer_state"], c["ex_logits"] = gr.State({}), gr.State(None)
        with gr.Tab("Quantization"):
            gr.Markdown(TEXT["quant"])
            c["quant_run"] = gr.Button("Compare precisions", variant="primary", **ids("quant_run"))
            c["quant_plot"] = gr.Plot(show_label=False, **ids("quant_plot"))
            c["quant_table"] = gr.Markdown("", **ids("quant_table"))
        with gr.Tab("Batch size"):
            c.update(lesson_batch.build(engine, session_kwargs or (lambda session_id: {})))
        with gr.Tab("Memory-bound or compute-bound"):
            c.update(lesson_roofline.build(engine))
        with gr.Tab("Speculative decoding"):
            c.update(build_spec_lesson(engine))
    _wire(engine, c, session_kwargs or (lambda session_id: {}))
    return c


def _keep(value):
    """``None`` (a handler's "unchanged") as ``gr.skip()``, anything else as it is."""
    return gr.skip() if value is None else value


def _wire(engine, c: dict, session_kwargs) -> None:
    quiet = {"api_visibility": "private"}

    def on_kv(prompt, n, request: gr.Request):
        yield from kv_live(engine, prompt, n, submit_kwargs=session_kwargs(request.session_hash))

    c["kv_run"].click(guard(on_kv), [c["kv_prompt"], c["kv_tokens"]], [c["kv_plot"], c["kv_status"]],
                      show_progress="hidden", concurrency_limit=2, **quiet)

    def on_sweep(largest, repeats, progress=gr.Progress()):
        return run_sweep(engine, largest, repeats, progress)

    def on_share(n, sweep, progress=gr.Progress()):
        return run_share(engine, n, progress, sweep)

    def on_quant(progress=gr.Progress()):
        return run_quantization(engine, progress)

    def running(what: str):
        return lambda: f"<i>Running the {what}…</i>"

    c["quant_run"].click(guard(on_quant), None, [c["quant_plot"], c["quant_table"]],
                         concurrency_limit=1, concurrency_id="lesson-runs", **quiet)
    # the old conclusion goes first, so it never sits beside the next run's progress text
    c["sweep_run"].click(guard(running("sweep")), None, c["sweep_status"], queue=False, **quiet).then(
        guard(on_sweep), [c["sweep_max"], c["sweep_repeats"]],
        [c["sweep_plot"], c["sweep_status"], c["sweep_result"]], show_progress_on=[c["sweep_plot"]],
        concurrency_limit=1, concurrency_id="lesson-runs", **quiet)
    c["share_run"].click(guard(running("decode share")), None, c["share_status"], queue=False, **quiet).then(
        guard(on_share), [c["share_tokens"], c["sweep_result"]], [c["share_plot"], c["share_status"]],
        show_progress_on=[c["share_plot"]], concurrency_limit=1, concurrency_id="lesson-runs", **quiet)

    numbers = [c["calc_seq"], c["calc_batch"], c["calc_samples"], c["calc_prompt"], c["calc_chunk"],
               c["calc_overhead"]]
    calc_in = [c["calc_model"], c["calc_json"], c["calc_file"], c["calc_dtype"], c["calc_kv_dtype"],
               c["calc_act"], c["calc_share"], c["calc_last"], *numbers]

    def on_calc(*values):
        fig, table, status, last, *boxes = calculator_update(*values)
        return (_keep(fig), _keep(table), _keep(status), last, *[_keep(b) for b in boxes])

    # putting a refused value back changes the box again: that second event finds the numbers
    # equal to the last accepted ones and leaves the refusal message standing
    gr.on([comp.change for comp in calc_in if comp is not c["calc_last"]], guard(on_calc), calc_in,
          [c["calc_plot"], c["calc_table"], c["calc_status"], c["calc_last"], *numbers],
          show_progress="hidden", trigger_mode="always_last", **quiet)

    sliders = [c["ex_temp"], c["ex_topk"], c["ex_topp"], c["ex_minp"], c["ex_rep"]]
    answer, logits = c["ex_answer_state"], c["ex_logits"]

    def on_generate(prompt, seed, t, k, p, m, r, request: gr.Request):
        ans = explorer_generate(engine, prompt, t, k, p, m, seed, session_kwargs(request.session_hash), r)
        sl = explorer.step_logits(engine, ans["prompt_ids"], ans["token_ids"], 0)
        return (ans, sl, gr.Dropdown(choices=step_choices(ans), value=0), answer_html(ans),
                explorer_figure(sl, t, k, p, m, r))

    def on_step(ans, step, t, k, p, m, r):
        if not ans or step is None:
            return None, explorer_figure(None, t, k, p, m, r)
        sl = explorer.step_logits(engine, ans["prompt_ids"], ans["token_ids"], int(step))
        return sl, explorer_figure(sl, t, k, p, m, r)

    c["ex_run"].click(guard(on_generate), [c["ex_prompt"], c["ex_seed"], *sliders],
                      [answer, logits, c["ex_step"], c["ex_answer"], c["ex_plot"]], concurrency_limit=2,
                      **quiet)
    c["ex_step"].input(guard(on_step), [answer, c["ex_step"], *sliders], [logits, c["ex_plot"]],
                       concurrency_limit=1, concurrency_id="lesson-step", **quiet)
    for s in sliders:
        s.change(guard(explorer_figure), [logits, *sliders], c["ex_plot"], show_progress="hidden",
                 trigger_mode="always_last", **quiet)
