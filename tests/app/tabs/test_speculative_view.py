"""Speculative decoding on the page: chips of accepted drafts, the latency plot's marks, and
the lesson run on the embedded model."""

from types import SimpleNamespace

from app.render import figures
from app.state.run_state import RunState
from app.render.spec import spec_trace
from app.render.tokens import token_html


def _event(i, drafted=0, out=1, accepted=False, ms=10.0):
    return SimpleNamespace(
        phase="decode" if i else "prefill", token_text=f"t{i}", token_prob=0.9,
        top_candidates=[], text_delta=f"t{i}", kv_tokens=10 + i, num_tokens=1 + drafted,
        kv_bytes=100, batch_size=1, start_s=float(i), end_s=float(i) + ms / 1000, memory=None,
        finish_reason=None, num_drafted=drafted, draft_accepted=accepted, tokens_in_step=out)


def test_accepted_drafts_are_marked_on_chips_and_the_latency_plot():
    st = RunState()
    st.add(_event(0))
    st.add(_event(1))                                        # plain decode step
    # one verification step of 4 drafts: 2 accepted + the model's own token
    for j, acc in enumerate((True, True, False)):
        st.add(_event(2 + j, drafted=4, out=3, accepted=acc, ms=14.0))
    st.add(_event(5, drafted=4, out=1, ms=13.0))             # all 4 drafts rejected
    assert [t.draft for t in st.tokens] == [False, False, True, True, False, False]
    assert "tok-draft" in token_html(st.tokens[2], 3) and "draft accepted" in token_html(st.tokens[2], 3)
    assert "tok-draft" not in token_html(st.tokens[4], 5)
    tr = spec_trace(st.token_index, st.step_ms, st.drafted, st.step_out)
    assert tr["x"] == [5, 6] and tr["text"] == ["+3", "+1"]
    assert "2 accepted" in tr["customdata"][0] and "0 accepted" in tr["customdata"][1]
    fig = figures.latency_figure(st.token_index, st.step_ms, st.phases, spec=tr)
    assert fig.data[-1]["name"].startswith("speculative step")
    assert spec_trace([1, 2], [5.0, 5.0], [0, 0], [1, 1]) is None


def test_lesson_runs_both_prompts_on_the_engine(engine):
    """Three measured pairs per prompt: the bar is the median of the pairs' ratios, its error bar
    their lowest and highest, and the table prints the median, the spread and every ratio."""
    import statistics

    import pytest

    from app.tabs.lessons.speculative import PAIRS, PROMPTS, TEXT, run_spec_lesson

    assert PAIRS >= 3 and f"{PAIRS} pairs of turns" in TEXT and "median" in TEXT
    fig, table = run_spec_lesson(engine, new_tokens=24)
    names = [b for b in fig.data[0].x]
    assert names == list(PROMPTS)
    assert all(v > 0 for v in fig.data[0].y)
    assert "plain" in list(fig.data[1].x) and "| summarise with quotes |" in table
    assert table.count("| yes |") == 2                     # greedy tokens identical both times
    assert "Median step time by drafts verified" in table
    assert "3 pairs of turns per prompt" in table
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith(("| summarise", "| open"))]
    bars = fig.data[0]
    for i, cells in enumerate(rows):
        ratios = [float(x) for x in cells[4].split("(")[1].rstrip(")").replace("×", "").split(" · ")]
        assert len(ratios) == PAIRS
        assert bars.y[i] == pytest.approx(statistics.median(ratios), abs=0.005)  # printed to 2 decimals
        assert cells[3] == f"{bars.y[i]:.2f}×"
        lo, hi = bars.y[i] - bars.error_y.arrayminus[i], bars.y[i] + bars.error_y.array[i]
        assert cells[4].startswith(f"{lo:.2f}× to {hi:.2f}×")
        assert min(ratios) == pytest.approx(lo, abs=0.005) and max(ratios) == pytest.approx(hi, abs=0.005)


def test_lesson_refuses_a_bad_answer_length(engine):
    import pytest

    from app.tabs.lessons.speculative import run_spec_lesson

    with pytest.raises(ValueError, match="new tokens"):
        run_spec_lesson(engine, new_tokens=5000)
    with pytest.raises(ValueError, match="new tokens"):
        run_spec_lesson(engine, new_tokens="lots")
