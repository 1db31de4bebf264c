"""The prefill lesson's latency-against-prompt-length section on the real embedded model: TTFT
grows with the prompt, total = TTFT + TPOT × (N − 1) within the timestamps' rounding, nothing
comes from the prefix cache, and the table's equations are exact on the printed figures."""

from __future__ import annotations

import re

import pytest

from app.tabs.lessons import prefill
from app.tabs.lessons.roofline import model_shape


@pytest.fixture(scope="module")
def sweep(engine):
    return prefill.run_latency(engine, 8, 1, lengths=(64, 256, 1024))


def test_ttft_grows_and_the_total_is_the_latency_formula(sweep):
    rows = sweep["rows"]
    assert [r["prompt_tokens"] for r in rows] == sorted(r["prompt_tokens"] for r in rows)
    assert all(abs(r["prompt_tokens"] - n) <= 3 for r, n in zip(rows, (64, 256, 1024)))
    assert rows[-1]["ttft_s"] > rows[0]["ttft_s"]  # 16 times the prompt tokens to prefill
    for r in rows:
        assert r["output_tokens"] == 8 and r["cached_prompt_tokens"] == 0 and r["tpot_s"] > 0
        assert r["total_s"] == pytest.approx(r["ttft_s"] + r["tpot_s"] * 7, abs=1e-9)
        # the request's own end (finished − arrival) comes right after its last token
        assert 0 <= r["e2e_s"] - r["total_s"] < 0.05
    assert sweep["engine"]["prefix_caching"] is True  # the page's engine caches; the salts keep it idle


def test_table_equations_hold_on_the_printed_figures(engine, sweep):
    shape = model_shape(engine)
    html = prefill.latency_table(sweep, shape.kv_bytes_per_token, shape.weight_bytes)
    eqs = re.findall(r"([\d,.]+) \+ ([\d,.]+) × (\d+) = ([\d,.]+) ms", html)
    assert len(eqs) == 3
    for ttft, tpot, n1, total in eqs:  # exact in hundredths of a ms: nothing rounded
        ttft_c, tpot_c, total_c = (round(float(v.replace(",", "")) * 100) for v in (ttft, tpot, total))
        assert ttft_c + tpot_c * int(n1) == total_c and len(total.split(".")[1]) == 2
    last = sweep["rows"][-1]["prompt_tokens"]
    kv = re.search(rf"{last:,} × ([\d,]+) B = ([\d.]+) MB", html)
    assert kv and int(kv.group(1).replace(",", "")) == shape.kv_bytes_per_token
    assert float(kv.group(2)) == round(last * shape.kv_bytes_per_token / 1e6, 1)
    assert "prefix cache served 0 tokens" in html and html.count("<td>0 tokens</td>") == 3
    fig = prefill.latency_figure(sweep)
    assert [t.name for t in fig.data] == ["TTFT", "total", "TPOT"]
    assert list(fig.data[2].y) == pytest.approx([r["tpot_s"] * 1000 for r in sweep["rows"]])


def test_latency_sweep_refuses_values_it_does_not_offer(engine):
    with pytest.raises(ValueError, match="new tokens"):
        prefill.run_latency(engine, 500, 1)
    with pytest.raises(ValueError, match="rounds"):
        prefill.run_latency(engine, 16, "many")
    assert len(prefill.latency_figure(None).layout.annotations) == 3  # two subplot titles and the hint


def test_a_spent_budget_runs_one_round_and_says_so(engine):
    """No second round starts once the time budget is spent (here: none at all); the page says
    how many rounds were asked and why fewer ran."""
    res = prefill.run_latency(engine, 8, 3, lengths=(64,), budget_s=0.0)
    assert (res["repeats"], res["asked_repeats"]) == (1, 3) and len(res["rows"][0]["total_runs_s"]) == 1
    shape = model_shape(engine)
    assert "3 rounds asked" in prefill.latency_table(res, shape.kv_bytes_per_token, shape.weight_bytes)
