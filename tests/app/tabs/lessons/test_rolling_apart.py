"""The recent-requests table keeps lesson runs apart from users' requests and can be reset."""

import pytest

from app.render import cards
from engine import SamplingParams
from engine.output.events import RequestOutput
from engine.output.metrics import RequestMetrics
from engine.telemetry.rolling import RollingStats


def _out(e2e: float, source: str = "user") -> RequestOutput:
    m = RequestMetrics(ttft_s=e2e / 10, tpot_s=0.05, e2e_s=e2e, output_tokens=10, prompt_tokens=5)
    return RequestOutput(request_id="r", prompt_token_ids=[1], token_ids=list(range(10)), text="x",
                         finish_reason="stop", metrics=m, source=source)


def test_lesson_runs_stay_out_of_the_users_percentiles_and_reset_empties_both():
    rs = RollingStats(window=3)
    for e2e in (1.0, 2.0, 3.0):
        rs.add(_out(e2e))
    before = rs.version
    for _ in range(5):  # many long lesson runs push no user request out of the window
        rs.add(_out(38.0, "lesson"))
    s = rs.summary()
    assert s["count"] == 3 and s["e2e_s"]["p99"] == pytest.approx(2.98)
    assert s["lessons"]["count"] == 3 and s["lessons"]["e2e_s"]["p50"] == 38.0
    assert rs.version > before
    html = cards.rolling_table_html(s)
    assert "3 lesson runs kept apart, not in these percentiles" in html and "38.00 s" in html
    rs.reset()
    s = rs.summary()
    assert s["count"] == 0 and s["lessons"]["count"] == 0 and s["e2e_s"]["p50"] is None
    assert "lesson runs" not in cards.rolling_table_html(s)


def test_engine_tags_lesson_requests(engine):
    engine.rolling.reset()
    params = SamplingParams(temperature=0, max_tokens=2)
    assert engine.generate("Hi.", params).source == "user"
    assert engine.generate("Hi.", params, source="lesson").source == "lesson"
    s = engine.rolling.summary()
    assert s["count"] == 1 and s["lessons"]["count"] == 1
    with pytest.raises(ValueError, match="source must be one of user, lesson"):
        engine.submit("Hi.", params, source="teacher")


def test_the_pages_reset_button_empties_the_table(engine, tmp_path):
    from app.state.playground import Playground
    from app.page import build_demo

    pg = Playground(engine, trace_dir=tmp_path, monitor=False)
    demo = build_demo(pg)
    engine.generate("Hi.", SamplingParams(temperature=0, max_tokens=2))
    assert engine.rolling.summary()["count"] >= 1
    (fn,) = [f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "on_reset_rolling"]
    html = fn()
    assert engine.rolling.summary()["count"] == 0 and "0 recent requests" in html
    assert [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "rolling-reset"]
