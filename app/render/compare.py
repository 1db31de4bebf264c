"""The Compare tab's pictures, as pure functions of plain numbers (no Gradio, no engine).

Two runs, Left and Right, share each panel: one latency plot with both runs' per-token times
overlaid, one KV cache plot with both growth curves, one table of figures, and each run's
token chips with the first token where the answers part marked in both columns.
"""

from __future__ import annotations

import html

from app.render.fmt import fmt_bytes, fmt_int, fmt_rate, fmt_seconds
from app.render.plainfig import PlainFigure, add_hint, base_layout
from app.render.tokens import token_html, tokens_html

COLORS = {"left": "#2E86AB", "right": "#E4572E"}
"""Left blue, right orange-red, in every panel."""
LINES = {"left": {"width": 3.5}, "right": {"width": 2, "dash": "dot"}}
"""Left wide and solid, Right thin and dotted: where the two runs' points coincide (shared
batches step together), both lines still show."""
SIDES = ("left", "right")
HEIGHT = 260


def first_diff(a: list[int], b: list[int], finished: bool = True) -> int | None:
    """The 0-based index of the first output token where ``a`` and ``b`` differ.

    Args:
        a, b: token ids so far.
        finished: both runs have ended: a run that is a prefix of the other parts where the
            shorter one ends; while they stream, only a differing token counts.

    Returns:
        The index, or ``None`` when equal (so far).
    """
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if finished and len(a) != len(b):
        return min(len(a), len(b))
    return None


def gaps_ms(token_times_s: list[float]) -> list[float]:
    """Per-token times in ms: the first token's time from submit (TTFT), then the gap since the
    previous token (ITL; 0 for tokens of one verified speculative step).

    Args:
        token_times_s: seconds from submit to each output token.
    """
    out, last = [], 0.0
    for t in token_times_s:
        out.append(max(0.0, (t - last) * 1000.0))
        last = t
    return out


def latency_figure(runs: dict) -> PlainFigure:
    """Both runs' per-token times on one axis.

    Args:
        runs: ``{"left": token_times_s, "right": token_times_s}`` (seconds from submit).

    Returns:
        Two line traces (``x``: output token 1, 2, ...; ``y``: ms), Left then Right.
    """
    traces = []
    for side in SIDES:
        y = gaps_ms(runs.get(side) or [])
        traces.append({"type": "scatter", "mode": "lines+markers", "name": side.capitalize(),
                       "x": list(range(1, len(y) + 1)), "y": y,
                       "line": {"color": COLORS[side], **LINES[side]}, "marker": {"size": 4},
                       "hovertemplate": f"{side}: token %{{x}}<br>%{{y:.1f}} ms<extra></extra>"})
    layout = base_layout("Time per token (token 1: TTFT)", "output token #", "ms", HEIGHT)
    layout["yaxis"]["rangemode"] = "tozero"
    layout["margin"] = {"l": 56, "r": 12, "t": 40, "b": 40}
    layout["legend"] = {"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0,
                        "font": {"size": 11}, "bgcolor": "rgba(0,0,0,0)"}
    if not any(runs.get(s) for s in SIDES):
        add_hint(layout, "Press Run both: one line per side")
    return PlainFigure(traces, layout)


def kv_figure(runs: dict) -> PlainFigure:
    """Both runs' KV cache growth: measured bytes against tokens in the cache.

    Args:
        runs: ``{"left": (kv_tokens, kv_bytes), "right": (...)}`` after each step.
    """
    traces = []
    for side in SIDES:
        tokens, sizes = runs.get(side) or ([], [])
        traces.append({"type": "scatter", "mode": "lines+markers", "name": side.capitalize(),
                       "x": list(tokens), "y": list(sizes),
                       "line": {"color": COLORS[side], **LINES[side]}, "marker": {"size": 4},
                       "hovertemplate": f"{side}: %{{x}} tokens → %{{y:,}} B<extra></extra>"})
    layout = base_layout("KV cache bytes", "tokens in the cache", "bytes", HEIGHT)
    layout["yaxis"].update(rangemode="tozero", tickformat="~s")
    layout["xaxis"]["rangemode"] = "tozero"
    layout["margin"] = {"l": 56, "r": 12, "t": 40, "b": 40}
    layout["legend"] = {"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0,
                        "font": {"size": 11}, "bgcolor": "rgba(0,0,0,0)"}
    if not any((runs.get(s) or ([], []))[0] for s in SIDES):
        add_hint(layout, "Press Run both: each side's cache grows here")
    return PlainFigure(traces, layout)


ROWS = (
    ("settings", "settings", str),
    ("engine", "runs on", str),
    ("ttft_s", "TTFT", fmt_seconds),
    ("tpot_s", "TPOT", fmt_seconds),
    ("tokens_per_s", "decode tok/s", fmt_rate),
    ("tokens", "tokens", fmt_int),
    ("kv_cache_bytes", "KV bytes", fmt_bytes),
    ("weight_bytes", "weight bytes", fmt_bytes),
    ("acceptance", "acceptance", lambda v: f"{v:.0%}"),
    ("batch_size", "batch size (most)", fmt_int),
    ("first_diff", "answers part at token", lambda v: f"#{v + 1}"),
)
"""The table's rows: (key in a side's figures, label, formatter); ``None`` shows "–"."""


def table_html(figures: dict) -> str:
    """The figures of both runs side by side.

    Args:
        figures: ``{"left": {key: value}, "right": {...}}`` with the keys of :data:`ROWS`
            (seconds, bytes, tokens/s, a 0-based ``first_diff``; missing or ``None``: "–").
    """
    head = ("<tr><th></th>" + "".join(f"<th class='cmp-{s}'>{s.capitalize()}</th>" for s in SIDES)
            + "</tr>")
    rows = []
    for key, label, fmt in ROWS:
        cells = []
        for side in SIDES:
            v = (figures.get(side) or {}).get(key)
            cells.append("–" if v is None else html.escape(fmt(v)))
        rows.append(f"<tr><th>{label}</th>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table class='cmp-table'>{head}{''.join(rows)}</table>"


class DiffChips:
    """One column's token chips, grown chip by chip, the chip at ``mark`` (0-based) marked as
    where the answers part (class ``tok-diff``). The HTML only grows while the mark stays, so
    the live channel appends; a new mark redraws the column once."""

    def __init__(self) -> None:
        self._chips: list[str] = []
        self._mark: int | None = None

    def html(self, tokens: list, mark: int | None = None) -> str:
        """All chips (``tokens``: ``TokenView`` objects) with chip ``mark`` marked."""
        if mark != self._mark:
            self._chips, self._mark = [], mark
        for i in range(len(self._chips), len(tokens)):
            chip = token_html(tokens[i], i + 1)
            if i == mark:
                chip = chip.replace('class="tok', 'class="tok tok-diff', 1).replace(
                    'tabindex="0"', 'tabindex="0" title="the answers part here"', 1)
            self._chips.append(chip)
        return "".join(self._chips) if tokens else tokens_html([])
