"""Plotly figures of the live panels, as pure functions of plain numbers.

Nothing here knows about Gradio, the engine or torch: each builder takes lists and dicts and
returns a :class:`app.render.plainfig.PlainFigure` (plain dicts, no plotly validation on the hot path),
so the tests check the data points directly.
"""

from __future__ import annotations

import plotly.graph_objects as go

from app.render.fmt import fmt_bytes, fmt_int
from app.render.plainfig import PlainFigure, add_hint, base_layout

PREFILL = "#E4572E"   # orange-red: the prefill step
DECODE = "#2E86AB"    # blue: decode steps
FORMULA = "#555555"   # grey: the formula's prediction
PART_COLORS = {
    "weights": "#2E86AB",
    "kv_cache": "#E4572E",
    "activations": "#F3A712",
    "workspaces": "#C9A227",
    "allocator_cache": "#A8C686",
    "context_other": "#8E7DBE",
    "runtime_other": "#8E7DBE",
    "free": "#E6E6E6",
}
PART_LABELS = {
    "weights": "weights",
    "kv_cache": "KV cache",
    "activations": "activations",
    "workspaces": "workspaces",
    "allocator_cache": "allocator cache",
    "context_other": "CUDA context + other",
    "runtime_other": "runtime + other",
    "free": "free",
}
HEIGHT = 330
LIVE_HEIGHT = 230  # the latency and KV cache plots: on the first screen at 1280x720


def _legend_inside(layout: dict, left: bool) -> dict:
    """The legend in a top corner of the plot (the live plots are short: a legend below them
    would cover the x axis' title); ``left`` for the top-left corner, else the top-right."""
    layout["legend"] = {"orientation": "v", "yanchor": "top", "y": 0.98, "xanchor": "left" if left else "right",
                        "x": 0.01 if left else 0.99, "bgcolor": "rgba(255,255,255,0.75)", "font": {"size": 11},
                        "traceorder": "normal"}
    layout["margin"] = {"l": 60, "r": 16, "t": 36, "b": 40}
    return layout


LEGEND_ROW_CHARS = 72
"""Characters that one legend row holds in the latency panel at 1280 px: its names in 11 px
text plus about 7 characters' width of symbol per entry (the row runs from the figure's left
edge to the plot area's right); past it the legend takes two rows."""


def _legend_above(layout: dict, names: list[str]) -> dict:
    """The legend between the title and the plot area, so it covers no data point (inside the
    plot it hid the prefill marker of a short answer and the peaks of slow decode steps): one
    row when ``names`` are short enough, else two; the plot area gives up their height. It
    starts left of the plot area (x < 0), where Plotly lets a row use the left margin too."""
    rows = 1 if sum(len(n) + 7 for n in names) <= LEGEND_ROW_CHARS else 2
    layout["legend"] = {"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": -0.12,
                        "font": {"size": 11}, "traceorder": "normal", "bgcolor": "rgba(0,0,0,0)"}
    layout["title"].update(y=0.985, yanchor="top", yref="container")
    layout["margin"] = {"l": 60, "r": 16, "t": 38 + 18 * rows, "b": 40}
    return layout


def _hint(fig: go.Figure, text: str) -> go.Figure:
    """A grey note in the middle of a ``go.Figure`` (the Lessons' figures use it)."""
    fig.add_annotation(text=text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                       font={"size": 14, "color": "#888"})
    return fig


MARKER_POINTS = 150
"""Points a live trace draws as markers; past this many it is drawn as a line (Plotly draws every
marker as an SVG path of its own, so a 1,000-token answer's redraws cost several times its first
ones; a line is one path, and its points still answer on hover)."""


def _marked(mode: str, n: int) -> str:
    """``mode`` (with markers) for a live trace of ``n`` points: ``"lines"`` past
    :data:`MARKER_POINTS`."""
    return mode if n <= MARKER_POINTS else "lines"


def _scatter(name: str, x: list, y: list, mode: str, hovertemplate: str, **props) -> dict:
    return {"type": "scatter", "name": name, "x": x, "y": y, "mode": mode,
            "hovertemplate": hovertemplate, **props}


def latency_figure(token_index: list[int], step_ms: list[float], phases: list[str],
                   prompt_tokens: int = 0, use_kv_cache: bool = True,
                   batch_sizes: list[int] | None = None, prefill_computed: int | None = None,
                   spec: dict | None = None, prefill_steps: int = 1) -> PlainFigure:
    """Per-token latency: how long each engine step took, prefill marked apart from decode.

    Args:
        token_index: output token number each step produced (1, 2, ...).
        step_ms: step duration (forward pass + sampling) in milliseconds.
        phases: ``"prefill"`` or ``"decode"`` per step.
        prompt_tokens: prompt length, written on the prefill marker.
        use_kv_cache: when False the title says every step recomputes the whole sequence.
        batch_sizes: sequences sharing each step (shown on hover; a step with more requests
            in the batch takes longer).
        prefill_computed: prompt tokens the prefill pass computed, when fewer than
            ``prompt_tokens`` (the rest came from the prefix cache or earlier chunks).
        spec: a third trace marking speculative steps (:func:`app.render.spec.spec_trace`).
        prefill_steps: engine steps the prefill took (a long prompt is prefilled in chunks,
            one step each; its marker's time spans them all).

    Returns:
        A figure with a ``prefill`` trace (one marker) and a ``decode`` trace (a line).
    """
    batch = list(batch_sizes) if batch_sizes and len(batch_sizes) == len(token_index) else [1] * len(token_index)
    pre = ([], [], [])
    dec = ([], [], [])
    for row in zip(token_index, step_ms, phases, batch):
        xs, ys, cs = pre if row[2] == "prefill" else dec
        xs.append(row[0])
        ys.append(row[1])
        cs.append(row[3])
    traces = [
        _scatter(_prefill_name(prompt_tokens, prefill_computed, prefill_steps), pre[0], pre[1], "markers",
                 "prefill → token %{x}<br>%{y:.1f} ms<br>batch of %{customdata}<extra></extra>",
                 customdata=pre[2], marker={"color": PREFILL, "size": 13, "symbol": "diamond"}),
        _scatter("decode (1 token per step)" if use_kv_cache else "decode (no cache: all tokens each step)",
                 dec[0], dec[1], _marked("lines+markers", len(dec[0])),
                 "token %{x}<br>%{y:.1f} ms<br>batch of %{customdata}<extra></extra>",
                 customdata=dec[2], line={"color": DECODE, "width": 2}, marker={"size": 4}),
    ]
    if spec is not None:
        traces.append(spec)
    title = "Latency per token" + ("" if use_kv_cache else " — KV cache OFF")
    layout = _legend_above(base_layout(title, "output token #", "step time (ms)", LIVE_HEIGHT),
                           [t["name"] for t in traces])
    layout["yaxis"]["rangemode"] = "tozero"
    if not token_index:
        add_hint(layout, "Each token's step time is plotted here,<br>every second while an answer streams")
    return PlainFigure(traces, layout)


def _prefill_name(prompt_tokens: int, computed: int | None, steps: int = 1) -> str:
    if not prompt_tokens:
        return "prefill"
    passes = f"in {fmt_int(steps)} chunks" if steps > 1 else "in one pass"
    if computed is not None and 0 < computed < prompt_tokens:
        computed_how = f"{fmt_int(computed)} computed" + (f" {passes}" if steps > 1 else "")
        return (f"prefill ({fmt_int(prompt_tokens)} tokens: {computed_how}, "
                f"{fmt_int(prompt_tokens - computed)} from the prefix cache)")
    return f"prefill ({fmt_int(prompt_tokens)} tokens {passes})"


EMPTY_KV_TOKENS = 256
"""Tokens the formula line of an empty KV cache plot spans (its axes would read -1 to 1)."""


def kv_figure(kv_tokens: list[int], kv_bytes: list[int], bytes_per_token: int,
              use_kv_cache: bool = True, max_tokens_hint: int | None = None) -> PlainFigure:
    """KV cache growth: measured cache bytes against cached tokens, with the formula's line.

    Args:
        kv_tokens: tokens in the cache after each step.
        kv_bytes: measured bytes (sum of the cache tensors' ``nbytes``) after each step.
        bytes_per_token: the formula's bytes per cached token for this model and dtype.
        use_kv_cache: False draws only the formula (what a cache would have held).
        max_tokens_hint: extend the formula line to this many tokens (e.g. prompt + max new).

    Returns:
        A figure with a ``formula`` line trace and a ``measured`` marker trace.
    """
    # before any token the formula line still spans a context, so the axes read bytes and tokens
    top = max([0] + list(kv_tokens) + [max_tokens_hint or 0]) or EMPTY_KV_TOKENS
    traces = [
        _scatter(f"formula: {fmt_int(bytes_per_token)} B × tokens", [0, top], [0, bytes_per_token * top], "lines",
                 "%{x} tokens → %{y:,} B (formula)<extra></extra>",
                 line={"color": FORMULA, "dash": "dash", "width": 1.5}),
        _scatter("measured (cache tensors)", list(kv_tokens), list(kv_bytes), _marked("markers", len(kv_tokens)),
                 "%{x} tokens → %{y:,} B measured<extra></extra>", marker={"color": PREFILL, "size": 6}),
    ]
    last = f": {fmt_bytes(kv_bytes[-1])} now" if kv_bytes and use_kv_cache else ""
    title = ("KV cache size" + last) if use_kv_cache else "KV cache OFF: nothing is kept between steps"
    layout = _legend_inside(base_layout(title, "tokens in the cache", "bytes", LIVE_HEIGHT), left=True)
    layout["yaxis"].update(rangemode="tozero", tickformat="~s")
    layout["xaxis"]["rangemode"] = "tozero"
    if not kv_tokens:
        add_hint(layout, "The cache's size is plotted here,<br>every second while an answer streams")
    elif not use_kv_cache:
        add_hint(layout, "Each step recomputes keys and values of the whole sequence")
    return PlainFigure(traces, layout)


def memory_figure(memory: dict | None, request_kv_bytes: int | None = None,
                  request_done: bool = False) -> PlainFigure:
    """Memory breakdown as one stacked horizontal bar; estimated parts hatched and marked (est.).

    Args:
        memory: a plain breakdown (``app.state.run_state.memory_to_plain``) or ``None``.
        request_kv_bytes: this request's own KV bytes; when the KV part is larger (a paged
            pool allocated up front for every request) the label says so and names both.
        request_done: the request has ended, so its blocks are back in the pool: the label
            says what it used, in the past.

    Returns:
        A figure with one bar trace per part, named like ``"weights 538.1 MB"``.
    """
    traces = []
    title = "Memory breakdown"
    if memory and memory.get("parts"):
        for part in memory["parts"]:
            name = part["name"]
            est = not part["measured"]
            label = f"{PART_LABELS.get(name, name)} {fmt_bytes(part['bytes'])}" + (" (est.)" if est else "")
            if name == "kv_cache" and request_kv_bytes is not None and part["bytes"] > request_kv_bytes:
                mine = (f"your last request used {fmt_bytes(request_kv_bytes)}, now free again" if request_done
                        else f"your request uses {fmt_bytes(request_kv_bytes)}")
                # two lines: a legend entry does not wrap, and one line overran the panel
                label = f"KV cache pool {fmt_bytes(part['bytes'])} (allocated up front;<br>{mine})"
            note = part.get("note") or ("estimate from the formulas" if est else "measured")
            traces.append({
                "type": "bar", "name": label, "y": [memory.get("device") or "memory"], "x": [part["bytes"]],
                "orientation": "h",
                "marker": {"color": PART_COLORS.get(name, "#999999"),
                           "pattern": {"shape": "/" if est else "", "fgcolor": "#333", "solidity": 0.35},
                           "line": {"color": "white", "width": 1}},
                "hovertemplate": f"{label}<br>%{{x:,}} B<br>{note}<extra></extra>"})
        title = f"Memory: {memory.get('total_label', 'total')} {fmt_bytes(memory.get('total_bytes'))}"
    layout = base_layout(title, "", "", HEIGHT, barmode="stack")
    layout["legend"]["y"] = -0.15
    layout["xaxis"] = {"title": {"text": ""}, "tickformat": "~s"}
    layout["yaxis"] = {"title": {"text": ""}, "showticklabels": False}
    if not memory or not memory.get("parts"):
        add_hint(layout, "Memory appears after the first step (hatched = estimated)")
    return PlainFigure(traces, layout)


def device_figure(samples: list[dict], gpu_available: bool, reason: str = "",
                  name: str = "") -> PlainFigure:
    """Device over time: GPU utilization, power and temperature, or CPU load and RSS on CPU.

    Args:
        samples: dicts with ``t`` (seconds, negative = ago) and, with a GPU, ``util_pct``,
            ``power_w``, ``temp_c``; without one, ``cpu_pct`` and ``rss_bytes``. Missing or
            ``None`` values are gaps.
        gpu_available: whether NVML readings are available.
        reason: why there is no GPU reading (shown in the title), e.g. "no NVIDIA GPU: running on CPU".
        name: the device's name for the title.

    Returns:
        A figure; the right-hand axis carries watts (GPU) or process RSS (CPU).
    """
    ts = [s["t"] for s in samples]

    def line(label, key, color, **props):
        return {"type": "scatter", "name": label, "x": ts, "y": [s.get(key) for s in samples],
                "mode": "lines", "line": {"color": color, **props.pop("line", {})}, **props}

    if gpu_available:
        traces = [line("GPU util %", "util_pct", DECODE), line("temp °C", "temp_c", PREFILL),
                  line("power W", "power_w", "#F3A712", yaxis="y2", line={"dash": "dot"})]
        title = f"GPU: {name}" if name else "GPU"
        right = "watts"
    else:
        traces = [line("CPU util % (whole machine)", "cpu_pct", DECODE),
                  line("process RSS", "rss_bytes", "#8E7DBE", yaxis="y2", line={"dash": "dot"})]
        title = reason or "no GPU reading"
        right = "RSS bytes"
    layout = base_layout(title, "seconds ago", "% or °C" if gpu_available else "CPU %", HEIGHT,
                         yaxis2={"overlaying": "y", "side": "right", "rangemode": "tozero", "tickmode": "auto",
                                 "title": {"text": right}, "tickformat": "~s", "showgrid": False},
                         margin={"l": 60, "r": 60, "t": 40, "b": 40})
    layout["yaxis"]["range"] = [0, 105]
    if not samples:
        add_hint(layout, "Waiting for the first device reading…")
    return PlainFigure(traces, layout)
