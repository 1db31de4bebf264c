"""The recent-requests table's footnote: counts with the right singular or plural, and which
requests its percentiles cover (finished ones only; TPOT only those with two or more tokens)."""

import pytest

from app.render import cards
from engine.output.events import RequestOutput
from engine.output.metrics import RequestMetrics
from engine.telemetry.rolling import RollingStats


def _out(reason: str, e2e: float, tokens: int = 10) -> RequestOutput:
    m = RequestMetrics(ttft_s=e2e / 10, tpot_s=0.05 if tokens > 1 else None, e2e_s=e2e,
                       output_tokens=tokens, prompt_tokens=5)
    return RequestOutput(request_id="r", prompt_token_ids=[1], token_ids=list(range(tokens)),
                         text="x", finish_reason=reason, metrics=m)


def test_the_footnote_says_the_percentiles_cover_only_the_finished_requests():
    rs = RollingStats()
    for reason, e2e in (("stop", 1.0), ("length", 3.0), ("abort", 50.0)):
        rs.add(_out(reason, e2e))
    s = rs.summary()
    html = cards.rolling_table_html(s)
    assert "3 recent requests (all users): 2 finished · 1 stopped · 0 failed" in html
    assert "The percentiles cover the 2 finished requests only." in html
    # and they do: the stopped request's 50 s is in no percentile
    assert s["e2e_s"]["p99"] == pytest.approx(1.0 + 0.99 * (3.0 - 1.0)) and "50.00 s" not in html


def test_one_request_is_singular_and_all_finished_are_said_so():
    rs = RollingStats()
    rs.add(_out("stop", 1.0))
    html = cards.rolling_table_html(rs.summary())
    assert "1 recent request (all users):" in html and "1 recent requests" not in html
    assert "The percentiles cover the one finished request." in html
    rs.add(_out("length", 2.0))
    assert "The percentiles cover all 2 of them." in cards.rolling_table_html(rs.summary())


def test_tpot_covers_only_requests_with_two_or_more_tokens():
    rs = RollingStats()
    rs.add(_out("stop", 1.0, tokens=1))  # one token: no TPOT
    rs.add(_out("stop", 2.0, tokens=8))
    s = rs.summary()
    assert s["tpot_count"] == 1
    html = cards.rolling_table_html(s)
    assert "all 2 of them; TPOT only the 1 with two or more output tokens." in html
    rs.reset()
    rs.add(_out("stop", 1.0, tokens=1))
    assert "TPOT none of them: it needs two or more output tokens" in cards.rolling_table_html(rs.summary())


def test_no_finished_request_means_no_percentiles():
    rs = RollingStats()
    rs.add(_out("abort", 1.0))
    html = cards.rolling_table_html(rs.summary())
    assert "1 recent request (all users): 0 finished · 1 stopped" in html
    assert "No finished request yet, so no percentiles." in html
    assert "0 recent requests" in cards.rolling_table_html({})
