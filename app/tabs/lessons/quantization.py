"""Lesson: quantization. Every weights and KV cache precision side by side: each variant is
loaded for a moment (apart from the engine that serves the page) and scored against fp32 by
:mod:`engine.experiments.quantization`; here are its figure, its table and the tab. No torch here.
"""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.experiments import quantization

from app.render.figures import _hint
from app.render.fmt import fmt_bytes, fmt_int
from app.server.errors import guard
from app.tabs.lessons.gate import gated
from app.tabs.lessons import last_runs
from app.tabs.lessons.common import OFF, ON, elem, layout as _layout, progress_adapter

TITLE = "Quantization"
TEXT = (
    "Each precision is loaded for a moment and scored on a fixed text (English, Chinese "
    "and code) against fp32: how often its most likely next token agrees, and how far its "
    "next-token distribution moves (KL). When the weights dominate memory and time, as "
    "in batch-1 decode, quantize the weights; when the KV cache dominates (long contexts, "
    "many users), quantize or page the KV cache; when activations dominate (long "
    "prefills), use memory-efficient attention. A run takes a minute or two.\n\n"
    "Note what the reference is here: the embedded model ships as a 4-bit GGUF file (Q4_1), so "
    "**fp32 is that 4-bit file dequantized**, not an original full-precision model: int4 holds "
    "the same 4-bit values, while bf16, fp16 and int8 round them again. Which one agrees best "
    "is measured, and said under the table; with a model published in full precision the order "
    "would differ.")


HINT = "Press “Compare precisions” to measure each precision's memory, speed and agreement"


def quant_figure(res: dict | None) -> go.Figure:
    """Per variant: weight MB, decode tokens/s (× fp32) and top-1 agreement with fp32 (%).
    Before a run (``res`` is ``None``) the three panels with the variants on their x axes and
    no bars, and a note on what to press."""
    rows = (res or {}).get("rows", [])
    names = [r["label"].replace(" weights", "") for r in rows]
    if not res:
        names = [quantization.label(w, kv).replace(" weights", "") for w, kv in quantization.VARIANTS]
        rows = [dict.fromkeys(("weights_bytes", "decode_tokens_per_s_vs_fp32", "top1_agreement"))
                for _ in names]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("weights (MB)", "decode tok/s, × fp32",
                                                        "top-1 agreement with fp32 (%)"))
    def scaled(key, factor):
        return [r[key] * factor if r[key] is not None else None for r in rows]

    for col, (vals, color) in enumerate(((scaled("weights_bytes", 1e-6), ON),
                                         (scaled("decode_tokens_per_s_vs_fp32", 1), OFF),
                                         (scaled("top1_agreement", 100), "#F3A712")), 1):
        fig.add_trace(go.Bar(x=names, y=vals, marker_color=color, showlegend=False), row=1, col=col)
    _layout(fig, "Precision: memory, speed and agreement with fp32", "", "")
    fig.update_yaxes(range=[80, 100], row=1, col=3)
    if not res:
        fig.update_yaxes(showticklabels=False)
        _hint(fig, HINT)
    return fig


def _weights_cell(r: dict) -> str:
    """Stored weight bytes, and, where a dense table is kept only for the embedding lookup beside
    a packed copy of the tied LM head, the bytes a decode step reads: ``"325.7 MB (269.0 MB
    read per step)"``."""
    extra = r.get("lookup_only_bytes") or 0
    cell = fmt_bytes(r["weights_bytes"])
    return f"{cell} ({fmt_bytes(r['weights_bytes'] - extra)} read per step)" if extra else cell


def weights_note(rows: list[dict]) -> str:
    """Why a variant stores more bytes than its bytes per parameter say (bf16 beside fp16, both 2
    bytes): the tied embedding and LM head are one matrix in the model, and the bf16 variant keeps
    it twice, dense for the lookup and packed for the head's product. ``""`` when no row does."""
    held = [r for r in rows if r.get("lookup_only_bytes")]
    if not held:
        return ""
    names = ", ".join(r["label"] for r in held)
    extra = fmt_bytes(held[0]["lookup_only_bytes"])
    return (f"\n\n**Why {names} stores more than its bytes per parameter say:** the model's "
            "embedding and LM head are one tied matrix (vocabulary × hidden). This variant keeps "
            f"it twice: dense ({extra}), for looking up one row per token, and packed for the LM "
            "head's product, which streams it every step. A decode step reads the packed copy, not "
            "the dense table, so the bytes it reads are the figure in brackets, and those compare "
            "with the other variants' (docs/quantization.md).")


def agreement_note(rows: list[dict]) -> str:
    """Which precision agrees best with the fp32 reference in this run, computed from the rows'
    top-1 agreement (ties broken by KL), with int4's figures beside it: int4 holds the
    reference's own 4-bit values, yet its kernel takes bf16 scales and activations, so another
    precision can agree more. ``""`` with fewer than two variants besides fp32."""
    others = [r for r in rows if not (r.get("weights") == "fp32" and r.get("kv_cache_dtype") == "auto")]
    if len(others) < 2:
        return ""
    best = max(others, key=lambda r: (r["top1_agreement"], -r["kl_mean"]))
    pct = f"{best['top1_agreement'] * 100:.1f}%"
    line = f"\n\n**In this run {best['label']} agrees with fp32 best**: {pct} top-1, KL {best['kl_mean']:.4f}"
    int4 = next((r for r in others if r is not best and r.get("weights") == "int4"
                 and r.get("kv_cache_dtype") == "auto"), None)
    if int4 is not None:
        line += (f"; int4 {int4['top1_agreement'] * 100:.1f}%, KL {int4['kl_mean']:.4f}. int4 holds "
                 "the reference's own 4-bit values, but its kernel takes scales and activations in "
                 "bf16 (8 significant bits), and that rounding moves the next-token scores too")
    return line + "."


def quant_table(res: dict) -> str:
    """Markdown table: one row per variant with every measured figure, then which variant agrees
    best with fp32 (:func:`agreement_note`) and why a variant's weights hold more bytes than its
    bytes per parameter say (:func:`weights_note`), both from the rows."""
    lines = ["| precision | perplexity | top-1 vs fp32 | KL (nats) | weights | KV per token | "
             "decode b1 | prefill | batch |", "|" + " --- |" * 9]
    for r in res.get("rows", []):
        lines.append(
            f"| {r['label']} | {r['perplexity']:.2f} | {r['top1_agreement'] * 100:.1f}% | "
            f"{r['kl_mean']:.4f} | {_weights_cell(r)} | {fmt_int(r['kv_bytes_per_token'])} B | "
            f"{r['decode_tokens_per_s']:.1f} tok/s ({r['decode_tokens_per_s_vs_fp32']:.2f}×) | "
            f"{r['prefill_tokens_per_s']:.0f} tok/s | {r['batch_tokens_per_s']:.0f} tok/s |")
    p = res.get("params", {})
    lines.append(f"\nText: {p.get('text_tokens_actual')} tokens; prefill "
                 f"{p.get('prefill_tokens_actual', p.get('prefill_tokens'))} tokens; batch "
                 f"{p.get('batch')} × {p.get('batch_tokens')} new tokens; one quick round, so "
                 "speeds move with the machine's load (`python -m engine bench quantization` "
                 "runs the full sizes).")
    rows = res.get("rows", [])
    return "\n".join(lines) + agreement_note(rows) + weights_note(rows)


def run_quantization(engine, progress=None) -> tuple[go.Figure, str]:
    """The ``quantization`` experiment in quick mode on the page's model (its own engines)."""
    res = quantization.run(engine.experiment_model(), quick=True, progress=progress_adapter(progress))
    last_runs.record("quantization", {r["label"]: {"decode_tokens_per_s": r["decode_tokens_per_s"],
                                                  "weights_bytes": r["weights_bytes"]}
                                      for r in res.get("rows", [])})
    return quant_figure(res), quant_table(res)


def build(ctx) -> dict:
    """The lesson inside an open ``gr.Tab``: the run button, the figure and the table, wired to
    ``ctx.engine``. Returns the components by name."""
    engine = ctx.engine
    c: dict = {}
    gr.Markdown(TEXT)
    c["quant_run"] = gr.Button("Compare precisions", variant="primary", **elem("quant_run"))
    c["quant_plot"] = gr.Plot(quant_figure(None), show_label=False, **elem("quant_plot"))
    c["quant_table"] = gr.Markdown("", **elem("quant_table"))

    def on_quant(progress=gr.Progress()):
        return run_quantization(engine, progress)

    c["quant_run"].click(guard(gated(on_quant, "quantization")), None, [c["quant_plot"], c["quant_table"]],
                         concurrency_limit=None, api_visibility="private")
    return c
