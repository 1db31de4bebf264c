"""The KV cache calculator lesson: a model's memory against common GPUs.

Every byte count comes from :func:`engine.experiments.calculator.calculate` (the estimator's
formulas); here are the checks of the page's values, the figure and the table. No torch here.
"""

from __future__ import annotations

import json
import math

import plotly.graph_objects as go

from engine.experiments import calculator
from engine.telemetry.estimator import DTYPE_BYTES, ModelSpec, known_models

from app.render.fmt import fmt_bytes, fmt_int
from app.tabs.lessons.common import error_html, layout

TITLE = "KV cache calculator"
TEXT = ("The KV cache stores a key and a value vector per layer, per KV head and per token, so it "
        "grows linearly with context length and batch size while the weights stay fixed. Find the "
        "batch or context where the KV cache outgrows the weights, and which cards can still hold "
        "it. Total memory ≈ weights + KV cache + activations + framework overhead.")

PARTS = (("weights_bytes", "weights", "#2E86AB"), ("kv_bytes", "KV cache", "#E4572E"),
         ("activation_bytes", "activations", "#F3A712"), ("overhead_bytes", "framework overhead", "#8E8E8E"))
UNCHUNKED, CHUNKED = "one unchunked prefill", "chunked prefill"
ACTIVATIONS = (UNCHUNKED, CHUNKED)

MAX_CONFIG_BYTES = 1 << 20  # a pasted or uploaded config.json (real ones are a few KB)
MAX_CALC_SEQ_LEN = 1 << 24
MAX_CALC_BATCH = 1 << 20
MAX_SAMPLES = 64
MAX_OVERHEAD_GB = 64.0

# The number boxes, in the order the page passes them, with their defaults: a refused value is
# replaced by the last accepted one (the page keeps them in a state).
NUMBERS = ("seq_len", "batch", "samples", "prompt_tokens", "chunk_tokens", "overhead_gb")
DEFAULTS = {"seq_len": 4096, "batch": 1, "samples": 1, "prompt_tokens": 1024, "chunk_tokens": 2048,
            "overhead_gb": 0.5}
LABELS = {"seq_len": "sequence length", "batch": "batch", "samples": "answers per request",
          "prompt_tokens": "prompt tokens", "chunk_tokens": "chunk size", "overhead_gb": "framework overhead (GB)"}


def fmt_both(n: int | float) -> str:
    """Bytes in decimal and binary units: ``469762048 -> "469.8 MB (448.0 MiB)"``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{fmt_bytes(n)} ({n / size:.1f} {unit})"
    return fmt_bytes(n)


def _whole(name: str, value, lo: int, hi: int) -> int:
    """``value`` as an int in ``[lo, hi]`` (a whole float is fine); ValueError naming ``name``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"{name} must be a whole number in [{lo:,}, {hi:,}], got {shown}")
    return value


def check_numbers(seq_len, batch, samples=1, prompt_tokens=0, chunk_tokens=2048,
                  overhead_gb=0.0) -> dict:
    """The calculator's number fields, checked.

    Returns:
        ``{name: value}`` for :data:`NUMBERS` (``overhead_gb`` a float in GB, the rest ints).

    Raises:
        ValueError: the first refused field, named, with its range.
    """
    out = {"seq_len": _whole("sequence length", seq_len, 1, MAX_CALC_SEQ_LEN),
           "batch": _whole("batch", batch, 1, MAX_CALC_BATCH),
           "samples": _whole("answers per request", samples, 1, MAX_SAMPLES)}
    out["prompt_tokens"] = _whole("prompt tokens", prompt_tokens, 0, MAX_CALC_SEQ_LEN)
    out["chunk_tokens"] = _whole("chunk size", chunk_tokens, 1, MAX_CALC_SEQ_LEN)
    if isinstance(overhead_gb, bool) or not isinstance(overhead_gb, (int, float)) \
            or not math.isfinite(overhead_gb) or not 0 <= overhead_gb <= MAX_OVERHEAD_GB:
        raise ValueError(f"framework overhead must be a number of GB in [0, {MAX_OVERHEAD_GB:g}], "
                         f"got {str(overhead_gb)[:40]}")
    out["overhead_gb"] = float(overhead_gb)
    return out


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


def calculator_figure(calc: dict) -> go.Figure:
    """Weights, KV cache, activations and overhead as stacked shares of each GPU's memory."""
    fig = go.Figure()
    names = [g["name"] for g in calc["gpus"]]
    for key, label, color in PARTS:
        if key == "overhead_bytes" and not calc.get(key):
            continue
        fig.add_trace(go.Bar(
            y=names, x=[calc[key] / g["memory_bytes"] * 100 for g in calc["gpus"]], orientation="h",
            name=f"{label} {fmt_bytes(calc[key])}", marker_color=color,
            hovertemplate=f"{label}: {fmt_both(calc[key])}<br>%{{x:.1f}}% of %{{y}}<extra></extra>"))
    fig.add_vline(x=100, line_dash="dash", line_color="#555")
    samples = f" × {calc['samples']} answers" if calc.get("samples", 1) > 1 else ""
    layout(fig, f"{calc['model']}: {fmt_bytes(calc['total_bytes'])} at batch {calc['batch']}{samples}, "
                f"{fmt_int(calc['seq_len'])} tokens, weights {calc.get('weights_dtype', calc['dtype'])}, "
                f"KV {calc.get('kv_dtype', calc['dtype'])}", "% of GPU memory", "")
    fig.update_layout(barmode="stack")
    return fig


def _total_note(calc: dict) -> str:
    """The total row's assumption: with one unchunked prefill (the default) it says that is the
    worst case and gives the total with chunked prefill beside it (``calc["chunked"]``:
    ``{"chunk_tokens", "total_bytes"}``, set by :func:`calculator_view`); else ``""``."""
    alt = calc.get("chunked")
    if calc.get("chunk_tokens") or not alt:
        return ""
    return (f"activations of one unchunked prefill: the **worst case**; with chunked prefill "
            f"({fmt_int(alt['chunk_tokens'])} tokens per pass, as serving engines run it) the "
            f"total is {fmt_both(alt['total_bytes'])}")


def calculator_table(calc: dict) -> str:
    """Markdown: every part in MB and MiB, the assumptions, the KV formula, and per GPU whether
    it fits and the limits."""
    w, kv = calc.get("weights_dtype", calc["dtype"]), calc.get("kv_dtype", calc["dtype"])
    act = calc["activation_bytes"]
    chunk = calc.get("chunk_tokens")
    how = (f"chunked prefill: at most {fmt_int(chunk)} tokens per forward pass" if chunk
           else f"one unchunked prefill of {fmt_int(calc['batch'])} × {fmt_int(calc['seq_len'])} tokens "
                "at once, the worst case")
    lines = [
        "| part | bytes | assumption |", "| --- | --- | --- |",
        f"| weights | **{fmt_both(calc['weights_bytes'])}** | stored as {w}{_weights_note(calc)} |",
        f"| KV cache | **{fmt_both(calc['kv_bytes'])}** | {kv}, {fmt_int(calc['kv_bytes_per_token'])} B "
        f"per token{_samples_note(calc)} |",
        f"| activations | **{fmt_both(act)}** | estimate, in {calc['dtype']}: {how} |",
        f"| framework overhead | **{fmt_both(calc.get('overhead_bytes', 0))}** | CUDA context and "
        "allocator cache: a few hundred MB to a few GB, as you set it |",
        f"| **total** | **{fmt_both(calc['total_bytes'])}** | {_total_note(calc)} |",
        "", f"`{calc['kv_formula']}`", "",
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
    lines.append("\nMB and GB are decimal (10⁶ and 10⁹ bytes), MiB and GiB binary (2²⁰ and 2³⁰); GPU "
                 "memory is the nominal figure.")
    return "\n".join(lines)


def _weights_note(calc: dict) -> str:
    """For int4/int8 weights: the stored parts that add up to the weights row, beside the naive
    bits ÷ 8 × parameters (which leaves out the scales and the int8 embedding and LM head)."""
    parts = calc.get("weights_parts") or []
    if not parts:
        return ""
    per = DTYPE_BYTES[calc["weights_dtype"]]
    naive = per * calc["params"]
    terms = " + ".join(f"{fmt_bytes(p['bytes'])} {p['how']}" for p in parts if p["bytes"])
    return (f": {terms} = {fmt_bytes(sum(p['bytes'] for p in parts))}. "
            f"{per:g} B × {fmt_int(calc['params'])} parameters alone would be {fmt_bytes(naive)}: the "
            "difference is the scales and zeros and the int8 embedding and LM head")


def _samples_note(calc: dict) -> str:
    """The answers-per-request part of the KV row: the total counted (block sharing on or off, as
    the checkbox says) first, then the other one for comparison."""
    n = calc.get("samples", 1)
    if n <= 1:
        return ""
    unshared = f"<b>{fmt_bytes(calc['kv_bytes_unshared'])}</b> if each keeps its own prompt copy"
    blocks = (f"{fmt_int(calc['shared_tokens'] if calc.get('block_sharing') else calc['kv_shareable_tokens'])}"
              " prompt tokens in full 16-token blocks stored once")
    shared = f"<b>{fmt_bytes(calc['kv_bytes_shared'])}</b> with block sharing ({blocks})"
    if calc.get("block_sharing"):
        return f"; {n} answers per request (beams or samples), counted with block sharing: {shared}; {unshared}"
    return (f"; {n} answers per request (beams or samples), counted without block sharing: {unshared}; "
            f"{shared} would be the figure with sharing on")


def calculator_view(model: str, pasted: str | None, uploaded: str | None, seq_len, batch,
                    dtype: str, kv_dtype: str | None = None, activations: str = UNCHUNKED,
                    chunk_tokens=2048, overhead_gb=0.0, samples=1, prompt_tokens=0,
                    block_sharing: bool = True) -> tuple:
    """``(figure, markdown)`` for a model of the shipped table, or for the user's own
    ``config.json`` (uploaded or pasted; it wins over the table model when given).

    Args:
        dtype: the weights' dtype (activations run in it, or in bf16 for int8, int4 and fp8
            weights); kv_dtype: the KV cache's (``None``: ``dtype``).
        activations: :data:`UNCHUNKED` or :data:`CHUNKED` (``chunk_tokens`` per forward pass).
        overhead_gb: framework overhead in GB (10⁹ bytes).
        samples, prompt_tokens, block_sharing: answers per request, the prompt they share, and
            whether its blocks are stored once.

    A client never names a server-side file or a Hub id here: the model must be one of
    ``known_models()``, and a config comes as text or as an upload. A refused value gives an
    empty figure and a line naming the field.
    """
    try:
        n = check_numbers(seq_len, batch, samples, prompt_tokens, chunk_tokens, overhead_gb)
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"weights dtype must be one of {', '.join(DTYPE_BYTES)}")
        kv_dtype = kv_dtype or dtype
        if kv_dtype not in DTYPE_BYTES:
            raise ValueError(f"KV cache dtype must be one of {', '.join(DTYPE_BYTES)}")
        if activations not in ACTIVATIONS:
            raise ValueError(f"activations must be one of {', '.join(ACTIVATIONS)}")
        config = read_config(pasted, uploaded)
        if config is not None:
            name = str(config.get("_name_or_path") or "your config.json")[:80]
            spec = ModelSpec.from_config(config, name=name, source="your config.json")
        elif isinstance(model, str) and model in known_models():
            spec = model
        else:
            raise ValueError("pick a model from the list, or paste or upload its config.json")
        calc = calculator.calculate(
            spec, n["seq_len"], n["batch"], dtype, weights=dtype, kv_dtype=kv_dtype,
            chunk_tokens=n["chunk_tokens"] if activations == CHUNKED else None,
            overhead_bytes=int(round(n["overhead_gb"] * 1e9)), samples=n["samples"],
            prompt_tokens=n["prompt_tokens"], block_sharing=bool(block_sharing))
        if activations == UNCHUNKED:   # the worst case: the chunked total goes beside it
            alt = calculator.calculate(
                spec, n["seq_len"], n["batch"], dtype, weights=dtype, kv_dtype=kv_dtype,
                chunk_tokens=n["chunk_tokens"], overhead_bytes=int(round(n["overhead_gb"] * 1e9)),
                samples=n["samples"], prompt_tokens=n["prompt_tokens"], block_sharing=bool(block_sharing))
            calc["chunked"] = {"chunk_tokens": n["chunk_tokens"], "total_bytes": alt["total_bytes"]}
    except (ValueError, TypeError, ArithmeticError) as exc:  # about the user's own values
        return go.Figure(), error_html(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
    return calculator_figure(calc), calculator_table(calc)


def calculator_update(model, pasted, uploaded, dtype, kv_dtype, activations, block_sharing,
                      last: dict | None, *numbers) -> tuple:
    """The page's handler: a refused number never stays in its box beside an old chart.

    Args:
        model, pasted, uploaded, dtype, kv_dtype, activations, block_sharing: as for
            :func:`calculator_view`.
        last: the last accepted numbers (``{name: value}`` of :data:`NUMBERS`), or ``None``.
        numbers: the boxes' values in the order of :data:`NUMBERS`.

    Returns:
        ``(figure, markdown, status_html, accepted, *box_values)``, ``None`` meaning "leave
        it as it is": on a refused number the figure and table stay, the status names the
        field, and every box gets the last accepted value back; otherwise the new figure and
        table, the boxes as they are, and an empty status, unless the numbers equal the last
        accepted ones (as when the boxes were just put back: the refusal message stays).
    """
    last = {**DEFAULTS, **(last or {})}
    if any(v is None for v in numbers):  # a box emptied to type a new value: wait for it
        empty = ", ".join(LABELS[k] for k, v in zip(NUMBERS, numbers) if v is None)
        return (None, None, f"<i>Type a value for {empty}; the chart shows the last accepted ones.</i>",
                last, *[None] * len(NUMBERS))
    try:
        accepted = check_numbers(*numbers)
    except ValueError as exc:
        shown = ", ".join(f"{LABELS[k]} {last[k]:g}" for k in NUMBERS)
        status = error_html(f"{exc}; the boxes show the last accepted values again ({shown})")
        return (None, None, status, last, *[last[k] for k in NUMBERS])
    fig, table = calculator_view(model, pasted, uploaded, accepted["seq_len"], accepted["batch"], dtype,
                                 kv_dtype, activations, accepted["chunk_tokens"], accepted["overhead_gb"],
                                 accepted["samples"], accepted["prompt_tokens"], block_sharing)
    same = all(accepted[k] == last[k] for k in NUMBERS)  # e.g. the boxes just put back
    return (fig, table, None if same else "", accepted, *[None] * len(NUMBERS))



def build(ctx) -> dict:
    """The lesson inside an open ``gr.Tab``: the model, the numbers, an optional config.json,
    the figure and the GPU table; every change redraws them. Returns the components by name."""
    import gradio as gr

    from app.tabs.lessons.common import elem

    c: dict = {}
    gr.Markdown(TEXT)
    models = known_models()
    first = models[0] if models else ""
    d = DEFAULTS
    with gr.Row():
        c["calc_model"] = gr.Dropdown(models, value=first or None, label="model", scale=2,
                                      **elem("calc_model"))
        c["calc_seq"] = gr.Number(d["seq_len"], precision=0, label="sequence length (tokens, ≥ 1)",
                                  **elem("calc_seq"))
        c["calc_batch"] = gr.Number(d["batch"], precision=0, label="batch (requests)", **elem("calc_batch"))
        c["calc_dtype"] = gr.Dropdown(list(DTYPE_BYTES), value="fp16", label="weights dtype",
                                      **elem("calc_dtype"))
        c["calc_kv_dtype"] = gr.Dropdown(list(DTYPE_BYTES), value="fp16", label="KV cache dtype",
                                         **elem("calc_kv_dtype"))
    with gr.Row():
        c["calc_act"] = gr.Radio(list(ACTIVATIONS), value=UNCHUNKED, label="activations: prefill as",
                                 info="one unchunked prefill of batch × context tokens is the worst case",
                                 scale=2, **elem("calc_act"))
        c["calc_chunk"] = gr.Number(d["chunk_tokens"], precision=0, label="chunk (tokens per pass)",
                                    **elem("calc_chunk"))
        c["calc_overhead"] = gr.Number(d["overhead_gb"], label="framework overhead (GB)",
                                       **elem("calc_overhead"))
        c["calc_samples"] = gr.Number(d["samples"], precision=0, label="answers per request (beams)",
                                      **elem("calc_samples"))
        c["calc_prompt"] = gr.Number(d["prompt_tokens"], precision=0, label="of which prompt tokens",
                                     **elem("calc_prompt"))
        c["calc_share"] = gr.Checkbox(True, label="block sharing (prompt stored once)",
                                      **elem("calc_share"))
    with gr.Accordion("Or your own model: its config.json", open=False):
        with gr.Row():
            c["calc_json"] = gr.Textbox(label="paste config.json", lines=3, max_lines=12,
                                        placeholder='{"num_hidden_layers": 32, "hidden_size": 4096, ...}',
                                        **elem("calc_json"))
            c["calc_file"] = gr.State(None)  # uploads are off (app.server.file_routes): paste it
    c["calc_status"] = gr.HTML("", **elem("calc_status"))
    fig, table = calculator_view(first, "", None, d["seq_len"], d["batch"], "fp16", "fp16", UNCHUNKED,
                                 d["chunk_tokens"], d["overhead_gb"], d["samples"], d["prompt_tokens"])
    c["calc_plot"] = gr.Plot(fig, show_label=False, **elem("calc_plot"))
    c["calc_table"] = gr.Markdown(table, **elem("calc_table"))
    c["calc_last"] = gr.State(dict(DEFAULTS))
    _wire(c)
    return c


def _wire(c: dict) -> None:
    """Redraw on every change of an input (the refused value put back, see below)."""
    import gradio as gr

    from app.server.errors import guard
    from app.tabs.lessons.common import keep

    numbers = [c["calc_seq"], c["calc_batch"], c["calc_samples"], c["calc_prompt"], c["calc_chunk"],
               c["calc_overhead"]]
    calc_in = [c["calc_model"], c["calc_json"], c["calc_file"], c["calc_dtype"], c["calc_kv_dtype"],
               c["calc_act"], c["calc_share"], c["calc_last"], *numbers]

    def on_calc(*values):
        fig, table, status, last, *boxes = calculator_update(*values)
        return (keep(fig), keep(table), keep(status), last, *[keep(b) for b in boxes])

    # putting a refused value back changes the box again: that second event finds the numbers
    # equal to the last accepted ones and leaves the refusal message standing
    gr.on([comp.change for comp in calc_in if comp is not c["calc_last"]], guard(on_calc), calc_in,
          [c["calc_plot"], c["calc_table"], c["calc_status"], c["calc_last"], *numbers],
          show_progress="hidden", trigger_mode="always_last", api_visibility="private")
