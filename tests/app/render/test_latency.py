"""The latency calculator reproduces a worked example and refuses bad fields."""

import gradio as gr
import pytest

from app.render.latency import latency_calc, latency_calc_html


def test_the_worked_example_200_ms_plus_40_ms_times_199():
    r = latency_calc(200, 40, 200)
    assert r["latency_s"] == pytest.approx(0.2 + 0.04 * 199) == pytest.approx(8.16)
    assert r["decode_tokens_per_s"] == pytest.approx(25.0)
    assert r["overall_tokens_per_s"] == pytest.approx(200 / 8.16)
    html = latency_calc_html(200, 40, 200)
    assert "= 200.0 ms + 40.0 ms × (200 − 1) = <b>8.16 s</b>" in html
    assert "1 ÷ 40.0 ms = <b>25.0 tok/s</b>" in html and "200 ÷ 8.16 s = <b>24.5 tok/s</b>" in html


def test_one_token_costs_ttft_alone_and_n_is_linear():
    assert latency_calc(150, 30, 1)["latency_s"] == pytest.approx(0.15)
    a, b = (latency_calc(100, 20, n)["latency_s"] for n in (11, 21))
    assert b - a == pytest.approx(10 * 0.02)
    assert "undefined" in latency_calc_html(0, 40, 1)


@pytest.mark.parametrize("ttft, tpot, n, field", [(-1, 40, 10, "TTFT"), (200, 0, 10, "TPOT"),
                                                  (200, 40, 0, "output tokens"), (200, 40, 2.5, "output tokens"),
                                                  ("x", 40, 10, "TTFT"), (200, float("nan"), 10, "TPOT")])
def test_bad_fields_are_named(ttft, tpot, n, field):
    with pytest.raises(ValueError, match=field):
        latency_calc(ttft, tpot, n)
    assert "⚠" in latency_calc_html(ttft, tpot, n) and field in latency_calc_html(ttft, tpot, n)


def test_the_prefill_lesson_shows_the_calculator_at_the_worked_example():
    from app.tabs.lessons.prefill import _latency_calculator

    c: dict = {}
    with gr.Blocks():
        _latency_calculator(c)
    assert (c["lat_ttft"].value, c["lat_tpot"].value, c["lat_n"].value) == (200, 40, 200)
    assert "<b>8.16 s</b>" in c["lat_out"].value and "25.0 tok/s" in c["lat_out"].value
