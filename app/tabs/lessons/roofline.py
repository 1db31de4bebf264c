"""Lesson: memory-bound or compute-bound. The arithmetic intensity of a decode step against the
batch size, and of a prefill against the prompt length, beside the ridge points of this machine
(its measured read bandwidth and matmul FLOP/s) and of common GPUs (their datasheets' figures),
for the page's own model or any model of the calculator's list or a pasted ``config.json``.

The formulas and the published figures are ``engine.experiments.intensity`` and
:mod:`app.tabs.lessons.roofline_models`; the measurements ``engine.experiments.roofline``. Measuring runs no request through the engine (nothing to label
as a lesson run) but shares the machine with it. This module never imports torch.
"""

from __future__ import annotations

import html
import math

import gradio as gr
import plotly.graph_objects as go

from engine.experiments import intensity, roofline

from engine.model.model_spec import ModelSpec
from engine.telemetry.estimator import known_models, load_spec

from app.server import fields
from app.server.errors import guard
from app.tabs.lessons.gate import gated
from app.render.fmt import fmt_bytes, fmt_int
from app.tabs.lessons import last_runs, machine_profile, roofline_models as rm
from app.tabs.lessons.calculator import read_config
from app.tabs.lessons.common import error_html, progress_adapter

BATCHES = [2**i for i in range(11)]  # 1 ... 1024
PROMPTS = [2**i for i in range(4, 16)]  # 16 ... 32,768 tokens
MACHINE, MODEL, GPU, PAGE_MODEL = "#E4572E", "#2E86AB", "#8a8a8a", "#7FB3D5"
ENGINE_MODEL = "this page's model, as served"
"""The model dropdown's first choice: the engine's own weights and KV cache as stored."""
REFERENCE_GPU = "H100 SXM"  # the card the headline's answer names
BANDWIDTH_BYTES = 256 * 10**6  # the read-bandwidth tensor: several times any CPU's last-level cache
MATMUL_N = 1024

TITLE = "Memory-bound or compute-bound"
TEXT = (
    "Arithmetic intensity is the FLOPs a step does per byte it reads. A decode step reads every "
    "weight to compute one token per sequence, so at batch 1 it does only a few FLOPs per byte and "
    "waits for memory; batching reuses each weight for many sequences and raises the intensity. "
    "Look where the blue curves cross a device's **ridge point** (its FLOP/s ÷ its bandwidth): below "
    "it decode is memory-bound, above it compute-bound. The dotted curve is the weights alone; the "
    "solid one adds each sequence's own KV cache, which keeps long contexts memory-bound at any batch. "
    "Pick a model (or paste its config.json) to see where a 7B model turns compute-bound on an H100; "
    "the second plot is prefill, whose intensity grows with the prompt length instead.")


def chosen_shape(engine_shape: intensity.DecodeShape, engine_name: str, model: str, weights: str,
                 kv_dtype: str, pasted: str | None) -> tuple[str, intensity.DecodeShape, bool]:
    """``(name, shape, served)`` of the model the user chose: a pasted ``config.json`` wins,
    then a model of the calculator's list (weights and KV cache in the chosen dtypes), then
    :data:`ENGINE_MODEL` (``engine_shape``, as served; ``served`` is True only then).

    Raises:
        ValueError: a bad config.json, an unknown model or dtype; the message names the field.
    """
    config = read_config(pasted, None)
    if config is not None:
        name = str(config.get("_name_or_path") or "your config.json")[:80]
        try:
            spec = ModelSpec.from_config(config, name=name, source="your config.json")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"config.json: {str(exc).splitlines()[0][:160]}") from None
        return name, rm.spec_shape(spec, weights, kv_dtype), False
    if model == ENGINE_MODEL or model in (None, ""):
        return engine_name, engine_shape, True
    if model not in known_models():
        raise ValueError("model: pick one from the list, or paste its config.json")
    return model, rm.spec_shape(load_spec(model), weights, kv_dtype), False


def model_shape(engine) -> intensity.DecodeShape:
    """The page's model as :func:`engine.experiments.intensity.shape_of` sees it (weights as
    stored, the KV cache in the engine's own dtype)."""
    info = engine.info
    kv_bytes = info.kv_dtype_bytes or info.dtype_bytes
    return intensity.shape_of(info, engine.spec, engine.spec.kv_cache_bytes(1, kv_bytes))


USE_PROFILE = "Use this machine's profile"
"""The lesson's button: draws this machine's ridge from the machine profile
(:mod:`app.tabs.lessons.profile_panel` measures it again)."""


PROFILE_REPEATS = 3
"""Timed passes of each machine-profile measurement (after one warm-up); the profile keeps
their median."""


def measure_machine(engine) -> dict:
    """This machine's read bandwidth and matmul speed on the engine's device and compute dtype.

    One routine with fixed settings for every lesson and Remedies: :data:`BANDWIDTH_BYTES`
    read and :data:`MATMUL_N`-square products, the process's own thread count, one untimed
    warm-up, then the median of :data:`PROFILE_REPEATS` timed passes each (a median, not the
    best: on a shared machine the best pass is the rare quiet moment, the median what a lesson
    run meets).

    Returns:
        ``{"device", "dtype", "bandwidth_gb_per_s", "flops_per_s", "ridge"}`` (1 GB = 10⁹
        bytes; ridge in FLOPs per byte).
    """
    device, dtype = engine.info.device, engine.info.dtype
    bw = roofline.measure_bandwidth(device, BANDWIDTH_BYTES, repeats=PROFILE_REPEATS)
    mm = roofline.measure_matmul_flops(device, dtype, MATMUL_N, repeats=PROFILE_REPEATS)
    return {"device": device, "dtype": dtype, "bandwidth_gb_per_s": bw["median_gb_per_s"],
            "flops_per_s": mm["median_flops_per_s"],
            "ridge": intensity.ridge_point(mm["median_flops_per_s"], bw["median_gb_per_s"] * 1e9)}


def _context(value) -> int:
    n = fields.whole("context", value)
    if not 0 <= n <= 131072:
        raise ValueError(f"context must be in [0, 131072] tokens, got {n}")
    return n


GPU_DASHES = ("dash", "dot", "dashdot", "longdash", "longdashdot")
"""Each published GPU's ridge line its own dash, in :func:`intensity.published_ridges`'s order
(five grey lines in one dash could not be told apart)."""


def _ridges(machine: dict | None) -> list[tuple[str, float, str, str]]:
    """``(name, ridge, colour, dash)`` of the measured machine (when given, solid) and each GPU
    (grey, each its own dash from :data:`GPU_DASHES`)."""
    ridges = [(g["name"] + " (datasheet)", g["ridge"], GPU, GPU_DASHES[i % len(GPU_DASHES)])
              for i, g in enumerate(intensity.published_ridges())]
    if machine:
        ridges.insert(0, (f"this machine ({machine['device']}, measured)", machine["ridge"], MACHINE, "solid"))
    return ridges


def roofline_figure(shape: intensity.DecodeShape, context: int, machine: dict | None,
                    name: str = "", reference: intensity.DecodeShape | None = None) -> go.Figure:
    """Intensity (FLOPs per byte, log) against the batch (log): the model's decode step at
    ``context`` tokens (and with no cache to read, dotted), the ridge of ``machine`` (measured;
    ``None``: not yet) and of each published GPU, with the batch where the curve crosses it;
    ``reference`` (the page's own model, when another one is shown) as a thin line."""
    fig = go.Figure()
    y = [shape.intensity(b, context) for b in BATCHES]
    fig.add_trace(go.Scatter(x=BATCHES, y=y, mode="lines+markers", name=f"decode step, {fmt_int(context)} tokens of context",
                             line={"color": MODEL, "width": 3},
                             hovertemplate="batch %{x}: %{y:.1f} FLOPs per byte<extra></extra>"))
    fig.add_trace(go.Scatter(x=BATCHES, y=[shape.intensity(b, 0) for b in BATCHES], mode="lines",
                             name="weights only (no KV cache read)", line={"color": MODEL, "dash": "dot", "width": 1},
                             hovertemplate="batch %{x}: %{y:.1f} FLOPs per byte<extra></extra>"))
    if reference is not None:
        fig.add_trace(go.Scatter(x=BATCHES, y=[reference.intensity(b, context) for b in BATCHES], mode="lines",
                                 name=f"{ENGINE_MODEL}, {fmt_int(context)} tokens", line={"color": PAGE_MODEL, "width": 1},
                                 hovertemplate="this page's model, batch %{x}: %{y:.1f} FLOPs per byte<extra></extra>"))
    for label, ridge, color, dash in _ridges(machine):  # one legend entry per ridge (labels on the lines would overlap)
        fig.add_trace(go.Scatter(x=[BATCHES[0], BATCHES[-1]], y=[ridge, ridge], mode="lines",
                                 name=f"ridge of {label}: {ridge:.0f}",
                                 line={"color": color, "dash": dash, "width": 2 if color == MACHINE else 1},
                                 hovertemplate=f"{html.escape(label)}: ridge {ridge:.1f} FLOPs per byte<extra></extra>"))
        for ctx, what in ((context, "the whole step"), (0, "the weights alone")):
            b = shape.crossover_batch(ridge, ctx, largest=BATCHES[-1])
            if b is not None:
                fig.add_trace(go.Scatter(x=[b], y=[shape.intensity(b, ctx)], mode="markers", showlegend=False,
                                         marker={"color": color, "size": 10, "symbol": "x"},
                                         hovertemplate=f"{html.escape(label)}: {what} compute-bound from batch "
                                                       f"{b}<extra></extra>"))
    if not machine:
        fig.add_annotation(text=f"Press “{USE_PROFILE}” for its own ridge point", xref="paper", yref="paper",
                           x=0.02, y=0.02, xanchor="left", showarrow=False, font={"size": 12, "color": MACHINE})
    fig.update_xaxes(type="log", tickvals=BATCHES, ticktext=[str(b) for b in BATCHES], title_text="batch (sequences per decode step)")
    fig.update_yaxes(type="log", dtick=1, title_text="FLOPs per byte read")  # a label per decade
    fig.update_layout(template="plotly_white", height=460, margin={"l": 60, "r": 20, "t": 40, "b": 50},
                      title={"text": f"Decode: arithmetic intensity vs ridge points{': ' + name if name else ''}",
                             "x": 0.01, "font": {"size": 15}},
                      legend={"orientation": "v", "y": 1, "x": 1.01, "font": {"size": 11}})
    return fig


def prefill_figure(shape: intensity.DecodeShape, machine: dict | None, name: str = "") -> go.Figure:
    """Intensity (FLOPs per byte, log) of one prompt's prefill against its length (tokens, log),
    :func:`app.tabs.lessons.roofline_models.prefill_intensity`, beside the same ridges, with the
    prompt length where it crosses each."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=PROMPTS, y=[rm.prefill_intensity(shape, t) for t in PROMPTS], mode="lines+markers",
                             name="prefill of one prompt", line={"color": MODEL, "width": 3},
                             hovertemplate="%{x} prompt tokens: %{y:.1f} FLOPs per byte<extra></extra>"))
    for label, ridge, color, dash in _ridges(machine):
        fig.add_trace(go.Scatter(x=[PROMPTS[0], PROMPTS[-1]], y=[ridge, ridge], mode="lines",
                                 name=f"ridge of {label}: {ridge:.0f}",
                                 line={"color": color, "dash": dash, "width": 2 if color == MACHINE else 1},
                                 hovertemplate=f"{html.escape(label)}: ridge {ridge:.1f} FLOPs per byte<extra></extra>"))
        t = rm.prefill_crossover(shape, ridge, largest=PROMPTS[-1])
        if t is not None:
            # a ridge already passed below the axis's shortest prompt: marked at that prompt
            x = max(t, PROMPTS[0])
            when = (f"from {t} prompt tokens" if t >= PROMPTS[0] else
                    f"from {t} prompt token{'s' if t != 1 else ''}, already at the shortest shown")
            fig.add_trace(go.Scatter(x=[x], y=[rm.prefill_intensity(shape, x)], mode="markers", showlegend=False,
                                     marker={"color": color, "size": 10, "symbol": "x"},
                                     hovertemplate=f"{html.escape(label)}: prefill compute-bound {when}"
                                                   "<extra></extra>"))
    fig.update_xaxes(type="log", tickvals=PROMPTS, ticktext=[fmt_int(t) for t in PROMPTS],
                     title_text="prompt length (tokens, one prompt)")
    fig.update_yaxes(type="log", dtick=1, title_text="FLOPs per byte")
    fig.update_layout(template="plotly_white", height=380, margin={"l": 60, "r": 20, "t": 40, "b": 50},
                      title={"text": f"Prefill: arithmetic intensity vs prompt length{': ' + name if name else ''}",
                             "x": 0.01, "font": {"size": 15}},
                      legend={"orientation": "v", "y": 1, "x": 1.01, "font": {"size": 11}})
    return fig


def crossing_text(shape: intensity.DecodeShape, context: int, name: str) -> str:
    """One sentence answering "when does it turn compute-bound?" for :data:`REFERENCE_GPU`:
    the batch for the weights alone and for the whole step at ``context``, and the prompt
    length for a prefill, with the products behind the weights-alone figure."""
    g = next(g for g in intensity.published_ridges() if g["name"] == REFERENCE_GPU)
    ridge = g["ridge"]
    b0, bc = shape.crossover_batch(ridge, 0), shape.crossover_batch(ridge, context)
    t = rm.prefill_crossover(shape, ridge)
    per = int(round(shape.flops(1, 0)))
    at512 = 512 * per / shape.weight_bytes
    whole = (f"the whole step at {fmt_int(context)} tokens of context from batch {fmt_int(bc)}" if bc else
             f"the whole step at {fmt_int(context)} tokens of context never (it levels off near "
             f"{shape.intensity_limit(context):.0f})")
    return (f"**When does {html.escape(name)} turn compute-bound on an {REFERENCE_GPU}** (ridge "
            f"{g['tflops']:g} TFLOP/s ÷ {g['bandwidth_gb_per_s']:,.0f} GB/s = {ridge:.0f} FLOPs per byte)? "
            f"Decode with the weights alone from **batch {fmt_int(b0) if b0 else 'never'}**; {whole}; a prefill "
            f"from **{fmt_int(t) if t else 'no'} prompt tokens**. At batch 512 the weights alone do 512 × "
            f"{fmt_int(per)} FLOPs ÷ {fmt_int(shape.weight_bytes)} B = **{at512:,.0f} FLOPs per byte**.")


def roofline_table(shape: intensity.DecodeShape, context: int, machine: dict | None, name: str = "",
                   served: bool = True) -> str:
    """Markdown: per device its bandwidth, 16-bit FLOP/s, ridge point, the batch from which this model's decode turns
    compute-bound at ``context`` tokens and the prompt length from which its prefill does, with
    each figure's source."""
    b1 = shape.intensity(1, context)
    lines = [f"At batch 1 a decode step of this model reads **{fmt_bytes(shape.bytes_read(1, context))}** "
             f"(weights {fmt_bytes(shape.weight_bytes)} + {fmt_int(context)} cached tokens × "
             f"{fmt_int(shape.kv_bytes_per_token)} B) and does **{shape.flops(1, context) / 1e6:,.0f} MFLOPs**: "
             f"**{b1:.1f} FLOPs per byte**. " + (
                 f"Large batches approach {shape.intensity_limit(context):.0f} FLOPs per byte at this context."
                 if math.isfinite(shape.intensity_limit(context)) else
                 "With no cache to read, the intensity grows with the batch without bound."), "",
             f"| device | bandwidth | TFLOP/s | ridge (FLOPs/byte) | weights alone compute-bound from batch | "
             f"whole step at {fmt_int(context)} tokens | prefill compute-bound from (prompt tokens) | source |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def at(b):
        return fmt_int(b) if b is not None else "never"

    def line(name, bw_gb, flops, ridge, source):
        lines.append(f"| {name} | {bw_gb:,.1f} GB/s | {flops / 1e12:,.3g} | {ridge:,.1f} | "
                     f"{at(shape.crossover_batch(ridge, 0))} | {at(shape.crossover_batch(ridge, context))} | "
                     f"{at(rm.prefill_crossover(shape, ridge))} | {source} |")

    if machine:
        line(f"this machine ({machine['device']}, {machine['dtype']})", machine["bandwidth_gb_per_s"],
             machine["flops_per_s"], machine["ridge"],
             f"{machine_profile.stamp(machine) if 'measured_at' in machine else 'measured now'} (the "
             f"profile every lesson prints): sum over {BANDWIDTH_BYTES // 10**6} MB; {MATMUL_N}×{MATMUL_N} matmul")
    for g in intensity.published_ridges():
        line(f"{g['name']} ({g['dtype']})", g["bandwidth_gb_per_s"], g["tflops"] * 1e12, g["ridge"], g["source"])
    lines.append("\n“Never”: each sequence brings its own KV cache to read, so past some batch the bytes grow "
                 "as fast as the FLOPs; attention over the cache stays memory-bound.")
    if served:
        lines.append("\nThe model's bytes are as stored here (its weights' precision and the engine's KV cache "
                     "dtype); a GPU would run it in bf16, which doubles or quadruples the weight bytes and halves "
                     "or quarters the intensity. Measured figures move with the machine's load.")
    else:
        lines.append(f"\nThe weights: {fmt_int(shape.params)} parameters stored in {fmt_bytes(shape.weight_bytes)} "
                     f"({fmt_int(shape.weight_bytes)} B); the KV cache {fmt_int(shape.kv_bytes_per_token)} B per token. "
                     "Measured figures move with the machine's load.")
    return "\n".join(lines)


OVERHEAD_TEXT = (
    "**The third regime: overhead-bound.** The ridge tells memory-bound from compute-bound, but a "
    "small model on a fast machine is often neither: at batch 1 this page's own model (its 95 MB "
    "of int4 weights, whichever model the plots above show) takes a few milliseconds to read "
    "here (the table below works it out from the bandwidth measured in the same run), while "
    "transformers' model code spends more than that on Python, "
    "module calls and hundreds of tiny operators per token. Then the step's time is overhead, and "
    "the roof is far away. Compiling the decode step (``torch.compile``: the small operators "
    "fused into a few C++ loops, one graph per batch size) removes much of it; on a GPU, CUDA "
    "graphs replay a whole step with one launch for the same reason. The button times this "
    "engine's eager and compiled steps in turns at batch 1 (compiling first: about a minute the "
    "first time, seconds from the on-disk cache) and shows where a step's time goes.")
PARTS = ("matrix products", "attention", "other operators", "python and dispatch")
PART_COLORS = ("#2E86AB", "#A23B72", "#F18F01", "#8a8a8a")


def step_ms(res: dict) -> dict[str, float]:
    """ms per batch-1 decode step of each path, ``1000 / tokens per s`` of the timed runs (the
    figure the table prints), ``{"eager": ms, "compiled": ms}``."""
    b = res["batch_sizes"][0]
    return {p: 1000.0 / res[f"{p}_tokens_per_s"][b] for p in ("eager", "compiled")}


def step_parts(res: dict) -> dict[str, dict[str, float]]:
    """Each path's timed step (:func:`step_ms`) split by the shares of torch.profiler's profile
    (matrix products, attention, other operators, Python and dispatch): the profiler slows a step
    down, so its milliseconds are shares only, and the bars add up to the table's step time.

    Returns:
        ``{path: {part: ms}}``; a profile with no time keeps its parts at 0."""
    total = step_ms(res)
    out = {}
    for path, ms in total.items():
        prof = res["profile"][path]
        whole = sum(prof[part] for part in PARTS)
        out[path] = {part: (ms * prof[part] / whole if whole else 0.0) for part in PARTS}
    return out


def overhead_figure(res: dict | None) -> go.Figure:
    """Stacked bars: ms per batch-1 decode step of the eager and the compiled path (the timed
    runs' medians, as the table prints them), split into matrix products, attention, other
    operators and the rest (Python, dispatch) by the shares of ``engine.experiments.compile``'s
    profiles (:func:`step_parts`); an empty chart that says what it will hold when ``res`` is
    ``None``."""
    fig = go.Figure()
    paths = ("eager", "compiled")
    parts = step_parts(res) if res else None
    for part, color in zip(PARTS, PART_COLORS):
        ys = [parts[p][part] for p in paths] if res else [0, 0]
        fig.add_trace(go.Bar(x=list(paths), y=ys, name=part, marker_color=color,
                             hovertemplate=f"{part}: %{{y:.1f}} ms<extra></extra>"))
    if not res:
        fig.add_annotation(text="Press “Time eager against compiled” to split a step's time", xref="paper",
                           yref="paper", x=0.5, y=0.5, showarrow=False, font={"size": 13, "color": MACHINE})
    fig.update_layout(barmode="stack", template="plotly_white", height=340,
                      margin={"l": 60, "r": 20, "t": 40, "b": 40}, yaxis_title="ms per decode step (batch 1)",
                      title={"text": "Where a decode step's time goes", "x": 0.01, "font": {"size": 15}})
    return fig


def overhead_table(res: dict | None) -> str:
    """Markdown: tokens/s of each path, the ratio, the share of the bandwidth roof, the compile
    time, and the parity of their greedy tokens, all from one ``compile`` experiment run."""
    if not res:
        return "Not measured yet."
    b = res["batch_sizes"][0]
    eager, comp = res["eager_tokens_per_s"][b], res["compiled_tokens_per_s"][b]
    frac = res.get("roofline_fraction") or {}
    status = res["compile"]
    same = sum(p["equal"] for p in res["parity"])
    ms = step_ms(res)
    read_ms = res["bytes_per_step"] / (res["bandwidth_gb_per_s"] * 1e9) * 1e3
    rows = ["| path | decode tokens/s (batch 1, median) | ms per step | share of the roof |",
            "| --- | --- | --- | --- |",
            f"| eager (transformers' code) | {eager:.1f} | {ms['eager']:.1f} | {100 * frac.get('eager', 0):.1f}% |",
            f"| compiled | {comp:.1f} | {ms['compiled']:.1f} | {100 * frac.get('compiled', 0):.1f}% |"]
    return "\n".join(rows + [
        "", f"Compiled ÷ eager: **{comp / eager:.2f}×** (median of {len(res['rounds']['eager'][b])} "
        f"alternating turns). Reading a step's {fmt_bytes(res['bytes_per_step'])} (weights and KV "
        f"cache) at the {res['bandwidth_gb_per_s']:.1f} GB/s "
        f"{res.get('bandwidth_source') or 'measured in this run'} takes "
        f"**{read_ms:.1f} ms**; the rest of each step above is overhead. The roof: "
        f"{res['bandwidth_gb_per_s']:.1f} GB/s ÷ "
        f"{fmt_bytes(res['bytes_per_step'])} per step = {res['ceiling_tokens_per_s']:.0f} tokens/s. "
        "The bars split each timed step by the shares of a torch.profiler run (the profiler "
        "itself slows a step, so only its shares are used). "
        f"Compiling took {status['compile_s']:.0f} s"
        f"{' (kernels from the on-disk cache)' if status['cache_hits'] else ''}. Greedy tokens equal "
        f"on {same} of {len(res['parity'])} prompts; where they part, the eager logits were a "
        "near-tie that the fused kernels round the other way."])


def with_profile_bandwidth(res: dict, profile: dict) -> dict:
    """``res`` (a ``compile`` experiment result) with its roof on the machine profile's
    bandwidth (:mod:`app.tabs.lessons.machine_profile`), the figure the plots above print,
    instead of the experiment's own reading: ``bandwidth_gb_per_s`` (rounded to 0.1 as printed),
    ``ceiling_tokens_per_s`` (that ÷ ``bytes_per_step``), ``roofline_fraction`` and
    ``bandwidth_source`` (its stamp). A new dict; ``res`` is left as it is."""
    bw = round(profile["bandwidth_gb_per_s"], 1)
    ceiling = bw * 1e9 / res["bytes_per_step"]
    b = res["batch_sizes"][0]
    fraction = ({p: res[f"{p}_tokens_per_s"][b] / ceiling for p in ("eager", "compiled")}
                if b == 1 and ceiling > 0 else {})
    source = "of this machine's profile"
    if "measured_at" in profile:
        source += f" ({machine_profile.stamp(profile)}, the figure the plots above use)"
    return {**res, "bandwidth_gb_per_s": bw, "ceiling_tokens_per_s": ceiling,
            "roofline_fraction": fraction, "bandwidth_source": source}


def _overhead_section(ctx, c: dict) -> None:
    """The overhead-bound regime: its words, the button, the stacked bar and the table."""
    engine = ctx.engine
    gr.Markdown(OVERHEAD_TEXT)
    c["roof_overhead_run"] = gr.Button("Time eager against compiled", elem_id="lesson-roof-overhead-run")
    c["roof_overhead_plot"] = gr.Plot(overhead_figure(None), show_label=False, elem_id="lesson-roof-overhead-plot")
    c["roof_overhead_table"] = gr.Markdown(overhead_table(None), elem_id="lesson-roof-overhead-table")

    def on_time(progress=gr.Progress()):
        from engine.experiments import run_experiment

        res = run_experiment("compile", engine.experiment_model(), quick=True,
                             progress=progress_adapter(progress))
        if res.get("status") != "ok":
            raise gr.Error(f"the measurement failed: {res.get('error', 'unknown error')}", print_exception=False)
        res = with_profile_bandwidth(res, machine_profile.current(lambda: measure_machine(engine)))
        b = res["batch_sizes"][0]
        last_runs.record("compile", {"batch": b, "eager_tokens_per_s": res["eager_tokens_per_s"][b],
                                     "compiled_tokens_per_s": res["compiled_tokens_per_s"][b]})
        return overhead_figure(res), overhead_table(res)

    c["roof_overhead_run"].click(guard(gated(on_time, "eager against compiled")), None, [c["roof_overhead_plot"], c["roof_overhead_table"]],
                                 concurrency_limit=None, api_visibility="private")


def engine_model_name(engine) -> str:
    """The page's model as the dropdown's first choice describes it, e.g. ``"smollm2-135m (int4
    weights, bfloat16 KV cache)"``."""
    info = engine.info
    kv = getattr(info, "kv_dtype", None) or info.dtype
    return f"{info.name} ({info.weights} weights, {kv} KV cache)"


def served_note(engine_name: str, served_as: str, weights: str, kv_dtype: str) -> str:
    """The status line while the page's own model is shown: it is drawn as served
    (``served_as``, e.g. ``"int4 weights, bfloat16 KV cache"``), so the dtype boxes' ``weights``
    and ``kv_dtype`` are not used, and the line says so and where they apply."""
    return (f"<div class='roof-served'>{html.escape(engine_name)} is drawn as this page serves it "
            f"(<b>{html.escape(served_as)}</b>): the dtype boxes ({html.escape(str(weights))} "
            f"weights, {html.escape(str(kv_dtype))} KV cache) apply to a listed model or a pasted "
            "config.json, not to it.</div>")


def roofline_view(engine_shape, engine_name, model, weights, kv_dtype, pasted, context,
                  measured, served_as: str = "") -> tuple:
    """``(answer, decode figure, prefill figure, table, status html)`` for the chosen model
    (the answer: :func:`crossing_text`); on a refused value ``None`` for each but the status,
    an error line naming the field ("leave them as they are"). With the page's own model the
    status says it is drawn as served (``served_as``: its weights and KV cache dtypes,
    :func:`served_note`), not in the dtype boxes' dtypes."""
    try:
        n = _context(context)
        name, shape, served = chosen_shape(engine_shape, engine_name, model, weights, kv_dtype, pasted)
    except (ValueError, LookupError, TypeError, ArithmeticError) as exc:
        return None, None, None, None, error_html(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
    reference = None if served else engine_shape
    status = served_note(engine_name, served_as, weights, kv_dtype) if served and served_as else ""
    return (crossing_text(shape, n, name), roofline_figure(shape, n, measured, name, reference), prefill_figure(shape, measured, name),
            roofline_table(shape, n, measured, name, served), status)


def build(ctx) -> dict:
    """The lesson's tab content (call inside an open ``gr.Tab``; ``ctx``: the
    :class:`app.tabs.context.TabContext`): words, the model (the page's, one of the
    calculator's list, or a pasted config.json) and its dtypes, the context slider, the
    measure button, the decode and prefill figures and the table.

    Returns:
        The components by name (``roof_model``, ``roof_weights``, ``roof_kv``, ``roof_json``,
        ``roof_context``, ``roof_run``, ``roof_status``, ``roof_answer``, ``roof_plot``, ``roof_prefill_plot``,
        ``roof_table``, ``roof_overhead_run``, ``roof_overhead_plot``, ``roof_overhead_table``).
    """
    from app.tabs.lessons.common import keep

    engine = ctx.engine
    shape = model_shape(engine)
    name = engine_model_name(engine)
    c: dict = {}
    gr.Markdown(TEXT)
    with gr.Row():
        c["roof_model"] = gr.Dropdown([ENGINE_MODEL, *known_models()], value=ENGINE_MODEL, label="model",
                                      elem_id="lesson-roof-model", scale=3)
        c["roof_weights"] = gr.Dropdown(list(rm.WEIGHT_DTYPES), value="fp16", label="weights dtype (a listed model)",
                                        elem_id="lesson-roof-weights", scale=1)
        c["roof_kv"] = gr.Dropdown(list(rm.KV_DTYPES), value="fp16", label="KV cache dtype (a listed model)",
                                   elem_id="lesson-roof-kv", scale=1)
    with gr.Row():
        c["roof_context"] = gr.Slider(0, 8192, value=512, step=64, label="tokens of context per sequence",
                                      elem_id="lesson-roof-context", scale=3)
        c["roof_run"] = gr.Button(USE_PROFILE, variant="primary", elem_id="lesson-roof-run", scale=1)
    with gr.Accordion("Or your own model: its config.json", open=False):
        c["roof_json"] = gr.Textbox(label="paste config.json (wins over the list)", lines=3, max_lines=12,
                                    placeholder='{"num_hidden_layers": 32, "hidden_size": 4096, ...}',
                                    elem_id="lesson-roof-json")
    served_as = (f"{engine.info.weights or engine.info.dtype} weights, "
                 f"{engine.info.kv_dtype or engine.info.dtype} KV cache")
    c["roof_status"] = gr.HTML(served_note(name, served_as, c["roof_weights"].value, c["roof_kv"].value),
                               elem_id="lesson-roof-status")
    c["roof_answer"] = gr.Markdown(crossing_text(shape, 512, name), elem_id="lesson-roof-answer")
    machine = gr.State(None)
    c["roof_plot"] = gr.Plot(roofline_figure(shape, 512, None, name), show_label=False, elem_id="lesson-roof-plot")
    c["roof_prefill_plot"] = gr.Plot(prefill_figure(shape, None, name), show_label=False,
                                     elem_id="lesson-roof-prefill-plot")
    c["roof_table"] = gr.Markdown(roofline_table(shape, 512, None, name), elem_id="lesson-roof-table")
    inputs = [c["roof_model"], c["roof_weights"], c["roof_kv"], c["roof_json"], c["roof_context"]]
    outputs = [c["roof_answer"], c["roof_plot"], c["roof_prefill_plot"], c["roof_table"], c["roof_status"]]

    def view(model, weights, kv, pasted, context, measured):
        return tuple(keep(v) for v in roofline_view(shape, name, model, weights, kv, pasted, context, measured,
                                                    served_as))

    def on_measure(model, weights, kv, pasted, context):
        # the kept profile (measured when there is none or it is old); the panel's Measure again
        # is the one place that measures anew
        measured = machine_profile.current(lambda: measure_machine(engine))
        return (measured, *view(model, weights, kv, pasted, context, measured))

    quiet = {"api_visibility": "private"}
    c["roof_run"].click(guard(gated(on_measure, "roofline")), inputs, [machine, *outputs],
                        concurrency_limit=None, **quiet)
    gr.on([comp.change for comp in inputs], guard(view), [*inputs, machine], outputs,
          show_progress="hidden", trigger_mode="always_last", **quiet)
    _overhead_section(ctx, c)
    return c
