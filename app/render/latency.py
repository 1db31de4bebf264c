"""The latency calculator: end-to-end latency and throughputs from TTFT, TPOT and the answer
length, written out as the equation they come from. Pure functions, no Gradio, no torch.

Formula (docs/metrics.md): latency = TTFT + TPOT × (N − 1); the first token costs TTFT (queue
and prefill), each of the N − 1 later tokens one TPOT. A worked example:
200 ms + 40 ms × 199 = 8.16 s, and 1 / 40 ms = 25 tok/s while decoding.
"""

from __future__ import annotations

import html
import math

from app.render.fmt import fmt_int, fmt_rate, fmt_seconds
from app.server import fields

MAX_TOKENS = 10**7


def latency_calc(ttft_ms, tpot_ms, output_tokens) -> dict:
    """Latency and throughputs of one request.

    Args:
        ttft_ms: time to first token, milliseconds (>= 0).
        tpot_ms: time per output token after the first, milliseconds (> 0).
        output_tokens: N, the answer's length in tokens (1 to 10,000,000).

    Returns:
        ``latency_s`` (TTFT + TPOT × (N − 1), seconds), ``decode_tokens_per_s`` (1 / TPOT: one
        sequence while it decodes), ``overall_tokens_per_s`` (N / latency, the first token's
        wait included), and the inputs ``ttft_s``, ``tpot_s``, ``output_tokens``.

    Raises:
        ValueError: a field out of range or not a number (the message names it).
    """
    ttft = fields.number("TTFT (ms)", ttft_ms)
    tpot = fields.number("TPOT (ms)", tpot_ms)
    n = fields.whole("output tokens", output_tokens)
    if not (math.isfinite(ttft) and ttft >= 0):
        raise ValueError(f"TTFT (ms) must be 0 or more, got {ttft_ms}")
    if not (math.isfinite(tpot) and tpot > 0):
        raise ValueError(f"TPOT (ms) must be more than 0, got {tpot_ms}")
    if not 1 <= n <= MAX_TOKENS:
        raise ValueError(f"output tokens must be in [1, {MAX_TOKENS:,}], got {n}")
    ttft_s, tpot_s = ttft / 1000, tpot / 1000
    latency = ttft_s + tpot_s * (n - 1)
    return {"ttft_s": ttft_s, "tpot_s": tpot_s, "output_tokens": n, "latency_s": latency,
            "decode_tokens_per_s": 1 / tpot_s,
            "overall_tokens_per_s": n / latency if latency > 0 else math.inf}


def latency_calc_html(ttft_ms, tpot_ms, output_tokens) -> str:
    """The calculator's answer as HTML: the equation with the numbers, the decode rate and the
    overall rate; a bad field gives a warning line naming it instead."""
    try:
        r = latency_calc(ttft_ms, tpot_ms, output_tokens)
    except ValueError as exc:
        return f"<div class='status status-warn'>⚠ {html.escape(str(exc))}</div>"
    n = r["output_tokens"]
    overall = (f"Overall: N ÷ latency = {fmt_int(n)} ÷ {fmt_seconds(r['latency_s'])} = "
               f"<b>{fmt_rate(r['overall_tokens_per_s'])}</b>, lower because the first token waits TTFT"
               if r["latency_s"] > 0 else "Overall: undefined for a zero latency")
    return (
        "<div class='lesson-result'>"
        f"Latency = TTFT + TPOT × (N − 1) = {fmt_seconds(r['ttft_s'])} + {fmt_seconds(r['tpot_s'])} × "
        f"({fmt_int(n)} − 1) = <b>{fmt_seconds(r['latency_s'])}</b><br>"
        f"Decoding: 1 ÷ TPOT = 1 ÷ {fmt_seconds(r['tpot_s'])} = <b>{fmt_rate(r['decode_tokens_per_s'])}</b> "
        f"for this sequence<br>{overall}</div>")
