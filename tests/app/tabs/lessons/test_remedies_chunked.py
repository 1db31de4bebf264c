"""The Remedies lesson's chunked-prefill run on the embedded model (real engines, no stubs): a
long prompt arrives beside a running answer, prefilled in chunks and in one step; the figure and
the cell show both what chunking does to the answer's gaps and to the long prompt's TTFT."""

from __future__ import annotations

import re

import pytest

from app.tabs.lessons import remedies, remedies_chunked
from app.tabs.lessons.runs import LessonEngine
from engine.experiments import remedies as measurements


@pytest.fixture(scope="module")
def run(engine):
    return measurements.chunked_prefill(LessonEngine(engine, "remedies"))


def test_chunking_splits_the_prefill_over_steps_that_keep_the_answer_going(run, engine):
    c, w = run["chunked"], run["whole"]
    assert run["chunk_tokens"] == engine.config.max_num_batched_tokens // 4  # this engine's cap
    assert c["long_prompt_tokens"] == w["long_prompt_tokens"] == run["long_prompt_tokens"] >= 500
    assert c["answer_tokens"] == w["answer_tokens"] == 12 and run["rounds"] == 2
    chunks = -(-run["long_prompt_tokens"] // run["chunk_tokens"])
    # chunked: the answer got a token in (nearly) every chunk's step; whole: in the one step only
    assert c["tokens_during"] >= chunks - 1 and w["tokens_during"] <= 1, (c["tokens_during"], w["tokens_during"])
    # whole: the answer waited the whole prefill between two tokens; chunked: never the whole one
    assert w["max_gap_s"] >= 0.8 * w["long_prefill_s"]
    assert c["max_gap_s"] < c["long_prefill_s"] and c["max_gap_s"] < w["max_gap_s"]
    for s in (c, w):
        assert s["ttft_s"] >= s["long_prefill_s"] > 0 and len(s["gaps_s"]) == s["answer_tokens"] - 1
        assert s["max_gap_s"] == max(s["gaps_s"])
    assert engine.config.long_prefill_token_threshold is None  # the page's engine left as it was


def test_the_cell_and_the_figure_print_both_effects_from_the_run(run):
    m = {"chunked_prefill": run}
    text = remedies.cell_chunked(m, {})
    c, w = run["chunked"], run["whole"]
    ms = {k: int(round(s[f] * 1000)) for k, s, f in (("gc", c, "max_gap_s"), ("gw", w, "max_gap_s"),
                                                     ("tc", c, "ttft_s"), ("tw", w, "ttft_s"))}
    assert f"longest gap **{ms['gc']:,} ms** ({c['tokens_during']} tokens during the prefill)" in text
    assert f"TTFT **{ms['tc']:,} ms**" in text and f"TTFT **{ms['tw']:,} ms**" in text
    assert f"{ms['gw']:,} ÷ {ms['gc']:,} = {ms['gw'] / ms['gc']:.1f}×" in text
    a, b = sorted((ms["tc"], ms["tw"]), reverse=True)
    assert f"{a:,} − {b:,} = {a - b:,} ms" in text
    fig = remedies_chunked.figure(run)
    assert len(fig.data) == 2 and fig.layout.title.text == remedies_chunked.TITLE
    for trace, s in zip(fig.data, (c, w)):
        assert list(trace.y) == pytest.approx([1000 * g for g in s["gaps_s"]])
        assert trace.name.endswith(f"its TTFT {int(round(s['ttft_s'] * 1000)):,} ms")
    # before a Measure the figure names the button and draws no value
    empty = remedies_chunked.figure(None)
    assert not empty.data and "Press “Measure”" in empty.layout.annotations[0].text


def test_the_remedy_points_at_this_figure():
    where = next(r.where for _, _, rs in remedies.BOTTLENECKS for r in rs if r.name == "chunked prefill")
    assert re.search(rf"\]\(#{remedies_chunked.PLOT_ID}\)", where), where
    assert "TTFT" in where and "gaps" in where


def test_a_figure_link_names_its_tab_once_and_the_page_script_knows_it():
    from app.tabs.lessons import remedy_links

    link = remedy_links.figure_link("Batch size", "lesson-batch-plot", "throughput, all sequences")
    assert link == "[Lessons › **Batch size**: “throughput, all sequences”](#lesson-batch-plot)"
    with pytest.raises(ValueError, match="lesson-batch-plot is on the Batch size tab"):
        remedy_links.figure_link("Quantization", "lesson-batch-plot", "x")
    js = remedy_links.follow_js()
    assert '"lesson-rem-chunk-plot": "Remedies"' in js and '"lesson-batch-plot": "Batch size"' in js
