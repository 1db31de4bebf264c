"""The stat cards and the lines under them print the same quantity the same way (issue: a
student checking every number by hand)."""

import re
from types import SimpleNamespace

from app.render import cards
from app.state.run_state import RunState


def _event(phase, start, end, num_tokens, kv_tokens, cached=0):
    return SimpleNamespace(phase=phase, start_s=start, end_s=end, num_tokens=num_tokens,
                           kv_tokens=kv_tokens, kv_bytes=kv_tokens * 100, cached_tokens=cached,
                           token_text="a", token_prob=0.5, top_candidates=[], text_delta="a",
                           memory=None, finish_reason=None, batch_size=1)


def _card(html: str, label: str) -> tuple[str, str]:
    """(value, line under it) of the card labelled ``label``."""
    card = html.split(f"<div class='stat-label'>{label}</div>", 1)[1].split("</div></div>", 1)[0]
    value = re.search(r"<div class='stat-value'>([^<]*)</div>", card).group(1)
    short = re.search(r"<div class='stat-def'>([^<]*)", card).group(1)
    return value, short


def _run(cached: int) -> RunState:
    """50 prompt tokens, ``cached`` of them from the prefix cache; a 274 ms prefill, then
    decode steps of 26.7 ms."""
    st = RunState(submitted_s=0.0)
    st.add(_event("prefill", 0.0, 0.274, 50 - cached, 50, cached))
    t = 0.274
    for i in range(9):
        st.add(_event("decode", t, t + 0.0267, 1, 51 + i))
        t += 0.0267
    return st


def test_prefill_speed_card_counts_computed_tokens_and_names_the_cached_ones():
    """48 of 50 prompt tokens from the prefix cache: the card's speed is the 2 computed tokens ÷
    the prefill time, both printed on the card, and the cached 48 named beside them, matching the
    line under the cards."""
    html = cards.stat_cards_html(_run(48).live_metrics(now=1.0))
    value, short = _card(html, "prefill speed")
    assert short == "2 ÷ 274.0 ms · 48 cached", short
    assert value == f"{2 / 0.274:.1f} tok/s"
    assert "50 prompt tokens (<b>2 computed</b>, 48 from the prefix cache)" in html
    # with no cache hit all 50 count, and nothing says "cached"
    html = cards.stat_cards_html(_run(0).live_metrics(now=1.0))
    value, short = _card(html, "prefill speed")
    assert short == "50 ÷ 274.0 ms" and value == f"{50 / 0.274:.0f} tok/s"


def test_the_tpot_card_prints_the_formulas_tpot():
    """TPOT 27.567 ms over 400 tokens: the formula needs two decimals for its total, and the
    card prints the same 27.57 ms, so the card's TTFT, TPOT and N give the printed total."""
    m = {"ttft_s": 0.2, "tpot_s": 0.027567, "output_tokens": 400, "e2e_s": 11.2,
         "decode_tokens_per_s": 36.3, "prefill_tokens_per_s": 85.0, "queue_time_s": 0.0,
         "prompt_tokens": 17, "final": True}
    html = cards.stat_cards_html(m)
    tpot_card, _ = _card(html, "TPOT")
    ttft_card, _ = _card(html, "TTFT")
    formula = re.search(r"= ([\d.]+ m?s) \+ ([\d.]+ ms) × \(", html).groups()
    assert (ttft_card, tpot_card) == formula == ("200.0 ms", "27.57 ms")
    # where one decimal is enough, both print one
    short = cards.stat_cards_html({**m, "output_tokens": 2, "tpot_s": 0.02756})
    assert _card(short, "TPOT")[0] == "27.6 ms" and "+ 27.6 ms ×" in short
