"""The Remedies lesson's chunked-prefill figure and cell: what chunking does to a running
answer's gaps between tokens and to the long prompt's own time to first token, both, from
:func:`engine.experiments.remedies.chunked_prefill` (chunked against one whole-prompt step).

No torch, no Gradio.
"""

from __future__ import annotations

import plotly.graph_objects as go

from app.render.fmt import fmt_int
from app.tabs.lessons.common import OFF, ON, layout

PLOT_ID = "lesson-rem-chunk-plot"
"""``elem_id`` of the figure (the chunked-prefill remedy's link points at it)."""
TITLE = "Chunked prefill: a running answer's gaps while a long prompt arrives"
HINT = "Press “Measure” to run a long prompt beside a running answer, chunked and in one step"


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def figure(r: dict | None) -> go.Figure:
    """The running answer's gap before each of its tokens (ms), chunked and whole, with the long
    prompt's TTFT (ms) in each line's name; ``r`` is the ``chunked_prefill`` measurement, or
    ``None`` / a failed one (``{"error"}``) for the axes and a note naming Measure."""
    fig = go.Figure()
    if not r or "error" in r:
        fig.add_annotation(text=HINT, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
    else:
        for side, colour, how in (("chunked", ON, f"in {fmt_int(r['chunk_tokens'])}-token chunks"),
                                  ("whole", OFF, "in one step")):
            s = r[side]
            gaps = [1000 * g for g in s["gaps_s"]]
            fig.add_trace(go.Scatter(
                x=list(range(2, len(gaps) + 2)), y=gaps, mode="lines+markers", line={"color": colour},
                name=f"prompt prefilled {how}: its TTFT {_ms(s['ttft_s']):,} ms"))
    return layout(fig, TITLE, "the running answer's token", "gap before the token (ms)")


def cell(r: dict) -> str:
    """The chunked-prefill remedy's figure in words (``r``: a successful measurement): both
    sides' longest gap, the answer's tokens during the prefill and the long prompt's TTFT, and
    the two quotients the figure shows; every printed result is the arithmetic of the printed
    numbers."""
    c, w = r["chunked"], r["whole"]
    gc, gw, tc, tw = _ms(c["max_gap_s"]), _ms(w["max_gap_s"]), _ms(c["ttft_s"]), _ms(w["ttft_s"])
    ratio = f"{gw / gc:.1f}×" if gc else "–"
    cost = tc - tw
    ttft = (f"it cost the long prompt {tc:,} − {tw:,} = {cost:,} ms of TTFT" if cost >= 0 else
            f"the long prompt's TTFT was {tw:,} − {tc:,} = {-cost:,} ms shorter all the same")
    return (f"a {fmt_int(r['long_prompt_tokens'])}-token prompt arrived while an answer was decoding. "
            f"Prefilled in chunks of {fmt_int(r['chunk_tokens'])} tokens: the answer's longest gap "
            f"**{gc:,} ms** ({c['tokens_during']} tokens during the prefill), the prompt's TTFT "
            f"**{tc:,} ms**; in one step: longest gap **{gw:,} ms** ({w['tokens_during']} token"
            f"{'s' if w['tokens_during'] != 1 else ''}), TTFT **{tw:,} ms**. "
            + (f"Chunking cut the gap {gw:,} ÷ {gc:,} = {ratio}" if gc < gw else
               f"This time chunking did not cut the gap ({gw:,} ÷ {gc:,} = {ratio}): the machine's "
               "load moved between the runs; measure again")
            + f"; {ttft} (each chunk's step also runs the answer's token)")
