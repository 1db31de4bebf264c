"""Speculative decoding on the page: the latency plot's marks for verification steps.

A verification step checks several drafted tokens in one forward pass and may produce several
tokens; its events share one duration. The marks sit on the last token of each such step and
say how many tokens the step produced from how many drafts.
"""

from __future__ import annotations

SPEC = "#6d28d9"   # violet: steps that verified draft tokens


def spec_trace(token_index: list[int], step_ms: list[float], drafted: list[int],
               step_out: list[int]) -> dict | None:
    """The latency plot's trace of verification steps, or ``None`` when there is none.

    Args:
        token_index: output token number of each event (1, 2, ...).
        step_ms: each event's step duration in milliseconds.
        drafted: draft tokens each event's step verified (0 for a plain step).
        step_out: tokens each event's step produced.

    Returns:
        A plain Plotly scatter trace: one marker per verification step at its last token,
        labelled ``+n`` (tokens produced), hover text with drafts verified and accepted.
    """
    xs, ys, labels, hover = [], [], [], []
    i, n = 0, min(len(token_index), len(step_ms), len(drafted), len(step_out))
    while i < n:
        if drafted[i] <= 0:
            i += 1
            continue
        out = max(1, step_out[i])
        last = min(n - 1, i + out - 1)
        xs.append(token_index[last])
        ys.append(step_ms[last])
        labels.append(f"+{out}")
        hover.append(f"verified {drafted[i]} drafts in one pass: {out - 1} accepted, "
                     f"{out} tokens")
        i = last + 1
    if not xs:
        return None
    return {"type": "scatter", "name": "speculative step (+tokens it produced)", "x": xs,
            "y": ys, "mode": "markers+text", "text": labels, "textposition": "top center",
            "customdata": hover, "hovertemplate": "token %{x}<br>%{y:.1f} ms<br>%{customdata}"
                                                 "<extra></extra>",
            "marker": {"color": SPEC, "size": 9, "symbol": "triangle-up"},
            "textfont": {"color": SPEC, "size": 10}}
