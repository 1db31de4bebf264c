"""The Lessons tab: five small experiments for a classroom, on the page's own engine.

(a) KV cache on against off, live; (b) prompt length sweep and decode share on demand; (c) the
KV cache calculator against common GPUs; (d) the sampling explorer; (e) quantization: every
weights and KV cache precision side by side (each variant loaded briefly, apart from the engine
that serves the page). The work that needs torch
lives in ``engine.experiments``; here are the layout, plain handler functions (testable without
a browser) and Plotly figures built from plain numbers. This module never imports torch.
"""

from __future__ import annotations

import html
import json
from typing import Iterator

import gradio as gr
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine import QueueFullError, SamplingParams
from engine.experiments import calculator, decode_share, explorer, prompt_length, quantization
from engine.telemetry.estimator import DTYPE_BYTES, ModelSpec, known_models

from . import fields, lesson_batch, lesson_roofline
from .errors import guard
from .figures import _hint
from .fmt import fmt_bytes, fmt_int, fmt_seconds

ON, OFF, PREFILL, DECODE = "#2E86AB", "#E4572E", "#E4572E", "#2E86AB"
PARTS = (("weights_bytes", "weights", "#2E86AB"), ("kv_bytes", "KV cache", "#E4572E"),
         ("activation_bytes", "activations", "#F3A712"))
HEIGHT = 340

TEXT = {
    "kv": "The same prompt runs twice, first with the KV cache and then without it; both runs "
          "produce the same tokens. With the cache each step feeds one new token, so the blue "
          "line stays flat. Without it every step recomputes the whole sequence, so the orange "
          "line climbs as the answer grows: compare the total times.",
    "prefill": "Prefill reads the whole prompt at once (long prompts in chunks of a few hundred "
               "tokens), so it processes many tokens per second. Watch where its time starts to "
               "grow with the prompt: on a GPU short prompts cost almost the same, while a CPU "
               "saturates early. Then see how small prefill is next to decode, which produces "
               "one token per step.",
    "calc": "The KV cache stores a key and a value vector per layer, per KV head and per token, "
            "so it grows linearly with context length and batch size while the weights stay "
            "fixed. Find the batch or context where the KV cache outgrows the weights, and which "
            "cards can still hold it.",
    "sampling": "At each step the model scores every token in its vocabulary; sampling turns "
                "those scores into a choice. Lower the temperature to sharpen the bars, raise it "
                "to flatten them; top-k, top-p and min-p cut the tail (grey outlines are the "
                "untouched probabilities). The red bar is the token the answer actually took.",
    "quant": "Each precision is loaded for a moment and scored on a fixed text (English, Chinese "
             "and code) against fp32: how often its most likely next token agrees, and how far its "
             "next-token distribution moves (KL). When the weights dominate memory and time, as "
             "in batch-1 decode, quantize the weights; when the KV cache dominates (long contexts, "
             "many users), quantize or page the KV cache; when activations dominate (long "
             "prefills), use memory-efficient attention. A run takes a minute or two.",
}


def _layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    fig.update_layout(title={"text": title, "font": {"size": 15}, "x": 0.01}, template="plotly_white",
                      height=HEIGHT, margin={"l": 60, "r": 20, "t": 50, "b": 50},
                      legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"})
    fig.update_xaxes(title_text=x)
    fig.update_yaxes(title_text=y)
    return fig


def _error(message: str) -> str:
    return f"<span style='color:#b00'>⚠ {html.escape(message)}</span>"


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
                runs.append(engine.submit(prompt, params, use_kv_cache=use, **(submit_kwargs or {})))
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


# ---- (b) prompt length and decode share --------------------------------------------------------
def sweep_figure(res: dict) -> go.Figure:
    """Prefill time (bars, ms) and prefill tokens/s (line) against prompt tokens."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = [str(t) for t in res["prompt_tokens"]]
    fig.add_trace(go.Bar(x=x, y=[s * 1000 for s in res["prefill_s"]], name="prefill time (ms)",
                         marker_color=PREFILL), secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=res["prefill_tokens_per_s"], name="prefill tokens/s",
                             mode="lines+markers", line={"color": DECODE}), secondary_y=True)
    _layout(fig, "Prefill vs prompt length", "prompt tokens", "prefill time (ms)")
    fig.update_yaxes(title_text="tokens/s", secondary_y=True, rangemode="tozero")
    return fig


def share_figure(res: dict) -> go.Figure:
    """One horizontal stacked bar: prefill and decode seconds, labelled with their shares."""
    fig = go.Figure()
    for key, share, name, color in (("prefill_s", "prefill_share", "prefill", PREFILL),
                                    ("decode_s", "decode_share", "decode", DECODE)):
        fig.add_trace(go.Bar(y=["request"], x=[res[key]], orientation="h", marker_color=color,
                             name=f"{name}: {fmt_seconds(res[key])} ({res[share] * 100:.1f}%)"))
    _layout(fig, f"{res['prompt_tokens']} prompt tokens, {res['new_tokens']} new tokens",
            "seconds", "")
    fig.update_layout(barmode="stack", height=220)
    return fig


def _adapter(progress):
    return (lambda f, m: progress(f, desc=m)) if progress is not None else None


def run_sweep(engine, largest: int, progress=None) -> tuple[go.Figure, str]:
    """Prompt length sweep from 16 tokens up to ``largest`` (powers of two), once each."""
    lengths = [n for n in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if n <= int(largest)]
    res = prompt_length.run(engine.loaded, quick=True, progress=_adapter(progress), engine=engine,
                            lengths=lengths, repeats=1)
    return sweep_figure(res), (f"Prefill stayed within 2× the shortest prompt's time up to "
                               f"<b>{fmt_int(res['cheap_until_tokens'])}</b> tokens.")


def run_share(engine, new_tokens: int, progress=None) -> tuple[go.Figure, str]:
    """Decode share of one request with ``new_tokens`` new tokens."""
    res = decode_share.run(engine.loaded, quick=True, progress=_adapter(progress), engine=engine,
                           new_tokens=int(new_tokens))
    return share_figure(res), (f"Decode took <b>{res['decode_share'] * 100:.1f}%</b> of prefill + "
                               f"decode; one decode step (TPOT) took {fmt_seconds(res['tpot_s'])}.")


# ---- (c) KV cache calculator -------------------------------------------------------------------
def calculator_figure(calc: dict) -> go.Figure:
    """Weights, KV cache and activations as stacked shares of each GPU's memory (100% = full)."""
    fig = go.Figure()
    names = [g["name"] for g in calc["gpus"]]
    for key, label, color in PARTS:
        fig.add_trace(go.Bar(
            y=names, x=[calc[key] / g["memory_bytes"] * 100 for g in calc["gpus"]], orientation="h",
            name=f"{label} {fmt_bytes(calc[key])}", marker_color=color,
            hovertemplate=f"{label}: {fmt_bytes(calc[key])}<br>%{{x:.1f}}% of %{{y}}<extra></extra>"))
    fig.add_vline(x=100, line_dash="dash", line_color="#555")
    _layout(fig, f"{calc['model']}: {fmt_bytes(calc['total_bytes'])} at batch {calc['batch']}, "
                 f"{fmt_int(calc['seq_len'])} tokens, {calc['dtype']}", "% of GPU memory", "")
    fig.update_layout(barmode="stack")
    return fig


def calculator_table(calc: dict) -> str:
    """Markdown: the figures, the KV formula, and per GPU whether it fits and the limits."""
    lines = [f"Weights **{fmt_bytes(calc['weights_bytes'])}** · KV cache **{fmt_bytes(calc['kv_bytes'])}** "
             f"({fmt_int(calc['kv_bytes_per_token'])} B per token) · activations "
             f"**{fmt_bytes(calc['activation_bytes'])}** (estimate) · total "
             f"**{fmt_bytes(calc['total_bytes'])}**", "", f"`{calc['kv_formula']}`", "",
             f"| GPU | memory | fits? | largest batch at {fmt_int(calc['seq_len'])} tokens | "
             f"longest context at batch {calc['batch']} |", "| --- | --- | --- | --- | --- |"]
    for g in calc["gpus"]:
        ctx = g["max_context"]
        ctx_s = "–" if not ctx else fmt_int(ctx) + (" (the model's window)"
                                                   if ctx == calc["max_positions"] else "")
        lines.append(f"| {g['name']} | {fmt_bytes(g['memory_bytes'])} | {'yes' if g['fits'] else 'no'} | "
                     f"{fmt_int(g['max_batch']) if g['max_batch'] else '–'} | {ctx_s} |")
    if calc["max_positions"] and calc["seq_len"] > calc["max_positions"]:
        lines.append(f"\n⚠ {fmt_int(calc['seq_len'])} tokens is beyond this model's window of "
                     f"{fmt_int(calc['max_positions'])} tokens.")
    lines.append("\nNominal memory; the CUDA context and allocator take a little of it.")
    return "\n".join(lines)


MAX_CONFIG_BYTES = 1 << 20  # a pasted or uploaded config.json (real ones are a few KB)
MAX_CALC_SEQ_LEN = 1 << 24
MAX_CALC_BATCH = 1 << 20


def _whole(name: str, value, lo: int, hi: int) -> int:
    """``value`` as an int in ``[lo, hi]`` (a whole float is fine); ValueError naming ``name``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"{name} must be a whole number in [{lo:,}, {hi:,}], got {shown}")
    return value


def read_config(pasted: str | None, uploaded: str | None) -> dict | None:
    """The ``config.json`` the user gave, as a dict: an uploaded file wins over pasted text.

    Args:
        pasted: JSON text from the page (or ``None``).
        uploaded: the path Gradio gives for a file the user uploaded (Gradio accepts only
            paths inside its own upload folder from a client); at most
            :data:`MAX_CONFIG_BYTES` of it are read.

    Returns:
        The JSON object, or ``None`` when neither was given.

    Raises:
        ValueError: not JSON, not an object, or larger than :data:`MAX_CONFIG_BYTES` (the
            message is about the user's own text, never about server files).
    """
    if uploaded:
        try:
            with open(uploaded, "rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        except OSError:
            raise ValueError("the uploaded file could not be read: upload it again") from None
        what = "the uploaded config.json"
    elif isinstance(pasted, str) and pasted.strip():
        try:
            raw = pasted.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("the pasted config.json is not valid Unicode text") from None
        what = "the pasted config.json"
    else:
        return None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ValueError(f"{what} is larger than {MAX_CONFIG_BYTES // 1024} KiB")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError or bad UTF-8
        raise ValueError(f"{what} is not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a JSON object ({{...}}), got {type(data).__name__}")
    return data


def calculator_view(model: str, pasted: str | None, uploaded: str | None, seq_len, batch,
                    dtype: str) -> tuple:
    """``(figure, markdown)`` for a model of the shipped table, or for the user's own
    ``config.json`` (uploaded or pasted; it wins over the table model when given).

    A client never names a server-side file or a Hub id here: the model must be one of
    ``known_models()``, and a config comes as text or as an upload.
    """
    try:
        seq_len = _whole("sequence length", seq_len, 1, MAX_CALC_SEQ_LEN)
        batch = _whole("batch", batch, 1, MAX_CALC_BATCH)
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}")
        config = read_config(pasted, uploaded)
        if config is not None:
            name = str(config.get("_name_or_path") or "your config.json")[:80]
            spec = ModelSpec.from_config(config, name=name, source="your config.json")
        elif isinstance(model, str) and model in known_models():
            spec = model
        else:
            raise ValueError("pick a model from the list, or paste or upload its config.json")
        calc = calculator.calculate(spec, seq_len, batch, dtype)
    except (ValueError, TypeError, ArithmeticError) as exc:  # about the user's own values
        return go.Figure(), _error(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
    return calculator_figure(calc), calculator_table(calc)


# ---- (d) sampling explorer ---------------------------------------------------------------------
def show_token(text: str) -> str:
    """A token's text with visible whitespace: ␣ for a space, ↵ for a newline, ∅ for empty."""
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def explorer_generate(engine, prompt: str, temperature, top_k, top_p, min_p, seed,
                      submit_kwargs: dict | None = None) -> dict:
    """Generate a short answer (32 tokens at most) with these sampling settings
    (``submit_kwargs``, such as the session's ``cache_salt``, go to ``engine.generate``).

    Returns:
        ``{"prompt_ids", "token_ids", "texts"}`` of the answer.

    Raises:
        gr.Error: a refused value (naming its field), a full queue, or a failed request.
    """
    try:
        prompt = fields.text("prompt", prompt)
        params = SamplingParams(temperature=fields.number("temperature", temperature),
                                top_k=fields.whole("top_k", top_k), top_p=fields.number("top_p", top_p),
                                min_p=fields.number("min_p", min_p), max_tokens=32,
                                seed=fields.whole("seed", seed))
        out = engine.generate(prompt, params, **(submit_kwargs or {}))
    except (ValueError, QueueFullError) as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    if not out.finished_ok:
        raise gr.Error(f"the request ended with {out.finish_reason}: {out.error}")
    tok = engine.tokenizer
    return {"prompt_ids": out.prompt_token_ids, "token_ids": out.token_ids,
            "texts": [tok.decode([i]) for i in out.token_ids]}


def step_choices(answer: dict) -> list[tuple[str, int]]:
    """Dropdown choices ``("3: ␣light", 3)`` for each step of the answer."""
    return [(f"{i}: {show_token(t)}", i) for i, t in enumerate(answer.get("texts", []))]


def explorer_figure(sl, temperature, top_k, top_p, min_p) -> go.Figure:
    """The top 20 candidates' probabilities after the sliders, raw ones as outlines."""
    if sl is None:
        fig = _layout(go.Figure(), "Generate an answer, then pick a step", "", "probability")
        return fig
    v = explorer.view(sl, float(temperature), int(top_k), float(top_p), float(min_p))
    idx = list(range(len(v["texts"])))
    colors = ["#C0392B" if i == sl.chosen_id else ("#2E86AB" if p > 0 else "#BBBBBB")
              for i, p in zip(v["token_ids"], v["probs"])]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=idx, y=v["raw_probs"], name="temperature 1, no filters",
                         marker={"color": "rgba(0,0,0,0)", "line": {"color": "#999", "width": 1}},
                         hovertemplate="%{y:.3f} (raw)<extra></extra>"))
    fig.add_trace(go.Bar(x=idx, y=v["probs"], name="after the sliders", marker_color=colors,
                         customdata=[show_token(t) for t in v["texts"]],
                         hovertemplate="%{customdata}: %{y:.3f}<extra></extra>"))
    where = (f"chosen token {show_token(sl.chosen_text)!r} is rank {sl.chosen_rank + 1}, "
             f"p = {v['chosen_prob']:.3f}")
    _layout(fig, f"Step {sl.step}: {fmt_int(v['kept'])} tokens left; {where}", "", "probability")
    fig.update_layout(barmode="overlay", bargap=0.15)
    fig.update_xaxes(tickvals=idx, ticktext=[show_token(t) for t in v["texts"]], tickangle=-45)
    fig.update_yaxes(range=[0, 1.02])
    return fig


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
    res = quantization.run(engine.loaded, quick=True, progress=_adapter(progress))
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
                c["sweep_run"] = gr.Button("Run prompt length sweep", variant="primary",
                                           **ids("sweep_run"))
                c["share_tokens"] = gr.Slider(20, 500, value=100, step=10, label="new tokens",
                                              **ids("share_tokens"))
                c["share_run"] = gr.Button("Run decode share", variant="primary", **ids("share_run"))
            with gr.Row():
                c["sweep_plot"] = gr.Plot(show_label=False, **ids("sweep_plot"))
                c["share_plot"] = gr.Plot(show_label=False, **ids("share_plot"))
            c["prefill_status"] = gr.HTML("", **ids("prefill_status"))
        with gr.Tab("KV cache calculator"):
            gr.Markdown(TEXT["calc"])
            models = known_models()
            first = models[0] if models else ""
            with gr.Row():
                c["calc_model"] = gr.Dropdown(models, value=first or None, label="model",
                                              **ids("calc_model"))
                c["calc_seq"] = gr.Slider(128, 131072, value=4096, step=128,
                                          label="sequence length (tokens)", **ids("calc_seq"))
                c["calc_batch"] = gr.Slider(1, 256, value=1, step=1, label="batch", **ids("calc_batch"))
                c["calc_dtype"] = gr.Dropdown(list(DTYPE_BYTES), value="fp16", label="dtype",
                                              **ids("calc_dtype"))
            with gr.Accordion("Or your own model: its config.json", open=False):
                with gr.Row():
                    c["calc_json"] = gr.Textbox(label="paste config.json", lines=3, max_lines=12,
                                                placeholder='{"num_hidden_layers": 32, "hidden_size": 4096, ...}',
                                                **ids("calc_json"))
                    c["calc_file"] = gr.File(label=f"or upload it (up to {MAX_CONFIG_BYTES // 1024} KiB)",
                                             file_types=[".json"], type="filepath", **ids("calc_file"))
            fig, table = calculator_view(first, "", None, 4096, 1, "fp16")
            c["calc_plot"] = gr.Plot(fig, show_label=False, **ids("calc_plot"))
            c["calc_table"] = gr.Markdown(table, **ids("calc_table"))
        with gr.Tab("Sampling explorer"):
            gr.Markdown(TEXT["sampling"])
            with gr.Row():
                c["ex_prompt"] = gr.Textbox("Name a colour and say why you like it.", label="Prompt",
                                            scale=4, **ids("ex_prompt"))
                c["ex_seed"] = gr.Number(0, precision=0, label="seed", scale=1, **ids("ex_seed"))
                c["ex_run"] = gr.Button("Generate an answer", variant="primary", scale=1,
                                        **ids("ex_run"))
            with gr.Row():
                c["ex_temp"] = gr.Slider(0, 2, value=0.8, step=0.05, label="temperature",
                                         **ids("ex_temp"))
                c["ex_topk"] = gr.Slider(0, 50, value=0, step=1, label="top-k (0 = off)", **ids("ex_topk"))
                c["ex_topp"] = gr.Slider(0.05, 1, value=1.0, step=0.01, label="top-p (1 = off)",
                                         **ids("ex_topp"))
                c["ex_minp"] = gr.Slider(0, 0.5, value=0.0, step=0.01, label="min-p (0 = off)",
                                         **ids("ex_minp"))
            c["ex_step"] = gr.Dropdown([], label="step of the answer (index: token)", interactive=True,
                                       **ids("ex_step"))
            c["ex_plot"] = gr.Plot(explorer_figure(None, 1, 0, 1, 0), show_label=False, **ids("ex_plot"))
            answer, logits = gr.State({}), gr.State(None)
        with gr.Tab("Quantization"):
            gr.Markdown(TEXT["quant"])
            c["quant_run"] = gr.Button("Compare precisions", variant="primary", **ids("quant_run"))
            c["quant_plot"] = gr.Plot(show_label=False, **ids("quant_plot"))
            c["quant_table"] = gr.Markdown("", **ids("quant_table"))
        with gr.Tab("Batch size"):
            c.update(lesson_batch.build(engine, session_kwargs or (lambda session_id: {})))
        with gr.Tab("Memory-bound or compute-bound"):
            c.update(lesson_roofline.build(engine))
    _wire(engine, c, answer, logits, session_kwargs or (lambda session_id: {}))
    return c


def _wire(engine, c: dict, answer, logits, session_kwargs) -> None:
    quiet = {"api_visibility": "private"}

    def on_kv(prompt, n, request: gr.Request):
        yield from kv_live(engine, prompt, n, submit_kwargs=session_kwargs(request.session_hash))

    c["kv_run"].click(guard(on_kv), [c["kv_prompt"], c["kv_tokens"]], [c["kv_plot"], c["kv_status"]],
                      show_progress="hidden", concurrency_limit=2, **quiet)

    def on_sweep(largest, progress=gr.Progress()):
        return run_sweep(engine, largest, progress)

    def on_share(n, progress=gr.Progress()):
        return run_share(engine, n, progress)

    def on_quant(progress=gr.Progress()):
        return run_quantization(engine, progress)

    c["quant_run"].click(guard(on_quant), None, [c["quant_plot"], c["quant_table"]],
                         concurrency_limit=1, concurrency_id="lesson-runs", **quiet)
    c["sweep_run"].click(guard(on_sweep), c["sweep_max"], [c["sweep_plot"], c["prefill_status"]],
                         concurrency_limit=1, concurrency_id="lesson-runs", **quiet)
    c["share_run"].click(guard(on_share), c["share_tokens"], [c["share_plot"], c["prefill_status"]],
                         concurrency_limit=1, concurrency_id="lesson-runs", **quiet)

    calc_in = [c["calc_model"], c["calc_json"], c["calc_file"], c["calc_seq"], c["calc_batch"], c["calc_dtype"]]
    for comp in calc_in:
        comp.change(guard(calculator_view), calc_in, [c["calc_plot"], c["calc_table"]],
                    show_progress="hidden", trigger_mode="always_last", **quiet)

    sliders = [c["ex_temp"], c["ex_topk"], c["ex_topp"], c["ex_minp"]]

    def on_generate(prompt, seed, t, k, p, m, request: gr.Request):
        ans = explorer_generate(engine, prompt, t, k, p, m, seed, session_kwargs(request.session_hash))
        sl = explorer.step_logits(engine, ans["prompt_ids"], ans["token_ids"], 0)
        return (ans, sl, gr.Dropdown(choices=step_choices(ans), value=0),
                explorer_figure(sl, t, k, p, m))

    def on_step(ans, step, t, k, p, m):
        if not ans or step is None:
            return None, explorer_figure(None, t, k, p, m)
        sl = explorer.step_logits(engine, ans["prompt_ids"], ans["token_ids"], int(step))
        return sl, explorer_figure(sl, t, k, p, m)

    c["ex_run"].click(guard(on_generate), [c["ex_prompt"], c["ex_seed"], *sliders],
                      [answer, logits, c["ex_step"], c["ex_plot"]], concurrency_limit=2, **quiet)
    c["ex_step"].input(guard(on_step), [answer, c["ex_step"], *sliders], [logits, c["ex_plot"]],
                       concurrency_limit=1, concurrency_id="lesson-step", **quiet)
    for s in sliders:
        s.change(guard(explorer_figure), [logits, *sliders], c["ex_plot"], show_progress="hidden",
                 trigger_mode="always_last", **quiet)
