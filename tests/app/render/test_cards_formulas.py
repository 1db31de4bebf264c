"""The formulas under the stat cards and in the KV panel, written out with a run's own numbers."""

from app.render import cards
from tests.support.fakes import fake_info

FINAL = {"ttft_s": 0.2, "tpot_s": 0.04, "decode_tokens_per_s": 25.0, "prefill_tokens_per_s": 85.0,
         "e2e_s": 8.17, "queue_time_s": 0.0, "prompt_tokens": 640, "output_tokens": 200,
         "cached_prompt_tokens": 623, "computed_prompt_tokens": 17, "final": True}


def test_latency_formula_uses_the_runs_numbers_and_shows_n():
    html = cards.stat_cards_html(FINAL)
    # a worked example: 200 ms + 40 ms × 199 = 8.16 s
    assert "Latency = TTFT + TPOT × (N − 1) = 200.0 ms + 40.0 ms × (200 − 1) = <b>8.16 s</b>" in html
    # end-to-end adds the finishing after the last token: 8.17 s − 8.16 s = 10.0 ms, said so
    assert ("measured end-to-end 8.17 s: the same token timestamps, plus 10.0 ms of finishing after "
            "the last token") in html and "N = 200 output tokens" in html
    live = cards.latency_formula_html({**FINAL, "final": False, "output_tokens": 1, "tpot_s": None})
    assert "× (1 − 1) = <b>200.0 ms</b>" in live and "measured" not in live
    assert cards.latency_formula_html({"ttft_s": None, "output_tokens": 0}) == ""


def test_cards_show_computed_and_cached_prompt_tokens_apart():
    html = cards.stat_cards_html(FINAL)
    assert "640 prompt tokens (<b>17 computed</b>, 623 from the prefix cache)" in html
    assert "computed prompt tokens / prefill time" in html and "85.0 tok/s" in html
    plain = cards.stat_cards_html({**FINAL, "cached_prompt_tokens": 0})
    assert "640 prompt tokens ·" in plain and "prefix cache)" not in plain


def test_kv_panel_says_why_the_cache_holds_n_minus_one_output_tokens():
    html = cards.kv_formula_html(fake_info(), tokens=12 + 5 - 1, prompt_tokens=12, output_tokens=5)
    assert "16 tokens = 12 prompt + (N − 1) = 4 output tokens, not N = 5" in html
    assert "next step takes it as input" in html
    assert "kv-why" not in cards.kv_formula_html(fake_info(), tokens=20, prompt_tokens=12, output_tokens=5)


def test_latency_is_checked_against_the_sum_of_the_step_times(engine):
    """A real request: the formula's total and end-to-end share their timestamps (said on the
    page), and the line adds the sum of the request's own step durations, measured apart, which
    can only be shorter than the time to the last token."""
    from engine import SamplingParams
    from app.render.fmt import fmt_seconds
    from app.state.run_state import RunState

    handle = engine.submit("Count to five.", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    out = handle.result(timeout=300)
    st = RunState()
    for ev in handle.events:
        st.add(ev)
    st.finish(out)
    m = st.live_metrics()
    steps = sum(ev.end_s - ev.start_s for ev in handle.events)  # one event per step here
    assert m["step_sum_s"] == steps and len(handle.events) == m["output_tokens"] == 12
    to_last = m["ttft_s"] + m["tpot_s"] * (m["output_tokens"] - 1)
    assert 0 < steps <= to_last <= m["e2e_s"]
    html = cards.latency_formula_html(m)
    assert f"plus {fmt_seconds(m['e2e_s'] - to_last)} of finishing" in html
    assert f"its steps add up to <b>{fmt_seconds(steps)}</b>" in html
    assert f"(+{fmt_seconds(to_last - steps)} between them)" in html
    # a step shared by several tokens (speculative decoding) counts once
    shared = RunState()
    for ev in handle.events[:1] * 3:
        shared.add(ev)
    assert shared.step_sum_s() == handle.events[0].end_s - handle.events[0].start_s


def test_the_latency_formula_adds_up_as_printed():
    """A student multiplying the printed TTFT and TPOT gets the printed total: 306.2 ms +
    43.6 ms × 89 = 4186.6 ms prints 4.19 s (the exact 43.56 ms gave 4.18 s beside it); a long
    answer prints TPOT with more decimals, so the total stays the exact one's."""
    import random
    import re
    from decimal import ROUND_HALF_UP, Decimal

    html = cards.latency_formula_html({"ttft_s": 0.3062, "tpot_s": 0.04356, "output_tokens": 90})
    assert "306.2 ms + 43.6 ms × (90 − 1) = <b>4.19 s</b>" in html
    rng = random.Random(3)
    for _ in range(500):
        m = {"ttft_s": rng.uniform(0.01, 3.0), "tpot_s": rng.uniform(0.005, 0.3),
             "output_tokens": rng.choice([2, 9, 90, 777, 2048, 8000])}
        line = cards.latency_formula_html(m)
        a, a_unit, b, n, total, t_unit = re.search(
            r"= ([\d.]+) (ms|s) \+ ([\d.]+) ms × \(([\d,]+) − 1\) = <b>([\d.,]+) (ms|s)</b>", line).groups()
        ms = Decimal(a) * (1000 if a_unit == "s" else 1) + Decimal(b) * (int(n.replace(",", "")) - 1)
        mine = (ms.quantize(Decimal("0.1"), ROUND_HALF_UP) if ms < 1000
                else (ms / 1000).quantize(Decimal("0.01"), ROUND_HALF_UP))
        assert (mine, "ms" if ms < 1000 else "s") == (Decimal(total.replace(",", "")), t_unit), line
        printed = float(total.replace(",", "")) * (1000 if t_unit == "s" else 1)
        exact = m["ttft_s"] + m["tpot_s"] * (m["output_tokens"] - 1)
        # and it stays within the rounding of its three printed numbers of the exact total
        assert abs(printed / 1000 - exact) <= 1.5 * (0.0001 if exact < 1 else 0.01), line


def test_tpot_of_a_one_token_answer_is_undefined_not_zero():
    html = cards.stat_cards_html({**FINAL, "output_tokens": 1, "tpot_s": 0.0, "decode_tokens_per_s": None})
    tpot_card = html.split("TPOT", 1)[1].split("</div></div>", 1)[0]
    assert "<div class='stat-value'>–</div>" in tpot_card and "0.0 ms" not in tpot_card
