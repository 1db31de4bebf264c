"""The decoding tab: its HTML from real engine events, its field checks, its handler end to end."""

import pytest

from app.tabs.beams.tab import build, params_for, run
from app.tabs.context import TabContext
from app.render.beams import beam_html, samples_html
from app.state.playground import Playground
from engine import SamplingParams


def test_beam_view_marks_shared_blocks_and_pruned_beams(engine):
    h = engine.submit("Explain the KV cache in one sentence.",
                      SamplingParams(temperature=0, num_beams=4, max_tokens=16))
    events = list(h)
    out = h.result()
    bs = engine.block_manager.block_size
    mid = events[len(events) // 2].beams
    page = beam_html(mid, engine.tokenizer.decode, bs)
    assert page.count("class='beam-live'") == 4
    assert "<span class=blk-ref>×4</span>" in page  # the prompt's blocks are held by all four beams
    n_tok = mid["logical_tokens"] // 4
    assert f"4 beams: {mid['logical_tokens']:,} tokens logically (4 × {n_tok:,})" in page
    assert f"{mid['physical_tokens']:,} tokens of blocks physically" in page
    pruned = [e.beams for e in events if e.beams["pruned"]]
    assert pruned and "class='beam-pruned'" in beam_html(pruned[-1], engine.tokenizer.decode, bs)
    final = beam_html(events[-1].beams, engine.tokenizer.decode, bs,
                      [{"text": o.text, "score": o.score, "finish_reason": o.finish_reason}
                       for o in out.outputs])
    assert "answer 1" in final and "finished hypotheses" in final


def test_beam_table_keeps_raw_and_normalised_scores_apart_and_the_summary_at_the_end(engine):
    h = engine.submit("Explain the KV cache in one sentence.",
                      SamplingParams(temperature=0, num_beams=3, max_tokens=12, length_penalty=1.0))
    events = list(h)
    h.result()
    bs = engine.block_manager.block_size
    views = [e.beams for e in events]
    last_live = [v for v in views if v["live"]][-1]
    end = views[-1]
    page = beam_html(end, engine.tokenizer.decode, bs, last_live=last_live)
    assert "<th>cumulative logprob</th><th>score (logprob ÷ length" in page
    for hyp in end["finished"]:  # one row: the raw logprob, then the normalised score
        assert f"<td>{hyp['logprob']:.3f}</td><td>{hyp['score']:.3f}</td>" in page
    if not end["live"]:  # the search ended: the logical-vs-physical line stays, said of its last step
        assert f"At step {last_live['step']}, the last with live beams" in page
        assert f"{last_live['logical_tokens']:,} tokens logically" in page
    assert "tokens logically" in page


def test_samples_side_by_side_escape_model_text():
    page = samples_html({0: "a <script>x</script>", 1: "b"},
                        {0: {"finish_reason": "stop", "cumulative_logprob": -3.5}})
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert page.count("class='decoding-col'") == 2 and "cumulative logprob -3.50" in page
    assert "side by side" in samples_html({})


def test_fields_are_checked_by_name():
    p = params_for("beam", 4, 0.8, 16, 1.0, "never", -1)
    assert p.num_beams == 4 and p.temperature == 0 and p.early_stopping == "never"
    p = params_for("sampling", 3, 0.8, 16, 1.0, "false", 7)
    assert p.n == 3 and p.seed == 7
    for args, msg in [(("greedy", 2, 0.8, 16, 1.0, "false", -1), "mode must be"),
                      (("beam", 99, 0.8, 16, 1.0, "false", -1), "width must be in"),
                      (("beam", 2, 0.8, 16, 1.0, "sometimes", -1), "early_stopping must be"),
                      (("beam", 2, 0.8, "x", 1.0, "false", -1), "max_tokens must be"),
                      (("beam", 2, 0.8, 16, None, "false", -1), "length_penalty must be")]:
        with pytest.raises(ValueError, match=msg):
            params_for(*args)


def test_the_handler_streams_beams_and_refuses_bad_values(engine):
    pg = Playground(engine, monitor=False)
    frames = list(run(pg, "s1", "beam", "Translate into French: good morning.", 3, 0.8, 12, 1.0,
                      "false", -1))
    assert len(frames) >= 2
    html, status = frames[-1]
    assert "answer 1" in html and "Finished" in status
    frames = list(run(pg, "s1", "sampling", "Name a colour.", 2, 0.9, 8, 1.0, "false", 3))
    html, status = frames[-1]
    assert html.count("class='decoding-col'") == 2 and "Finished" in status
    (_, status), = list(run(pg, "s1", "beam", "hi", 0, 0.8, 8, 1.0, "false", -1))
    assert "width must be in [1, 8]" in status
    assert engine.stats().blocks_used == 0 and not pg.session_busy("s1")


def test_the_tab_builds():
    import gradio as gr

    with gr.Blocks():
        c = build(TabContext())
    assert {"mode", "width", "run", "view", "status"} <= set(c)


def test_the_status_counts_each_finish_reason():
    from app.render.beams import finish_summary

    assert finish_summary(["stop", "length", "length", "stop"], "sample") == \
        "Finished: 2 stopped (EOS), 2 hit the length limit (of 4 samples)"
    assert finish_summary(["length"] * 4, "sample") == "Finished: all 4 samples hit the length limit"
    assert finish_summary(["stop"]) == "Finished: the answer stopped (EOS)"


def test_four_samples_cut_by_the_length_limit_say_so(engine):
    pg = Playground(engine, monitor=False)
    # 3 new tokens: the embedded model does not finish a count in three, so every sample hits
    # the length limit, and the status says so of all four (not "Finished: length")
    *_, (html, status) = run(pg, "s2", "sampling", "Count from 1 to 20: 1, 2,", 4, 0.8, 3, 1.0,
                             "false", 5)
    assert "all 4 samples hit the length limit" in status, status
    assert html.count("class='decoding-col'") == 4 and html.count("length · cumulative") == 4


def test_block_ids_and_reference_counts_stay_apart(engine):
    view = {"step": 3, "live": [{"logprob": -1.0, "token_ids": [], "blocks": [73, 469, 474]}],
            "ref_counts": {"73": 4, "469": 4}, "logical_tokens": 40, "physical_tokens": 48,
            "physical_blocks": 3}
    page = beam_html(view, engine.tokenizer.decode, 16)
    cell = page.split("<td class='beam-blocks'>")[1].split("</td>")[0]
    import re

    text = re.sub("<[^>]+>", "", cell)
    assert text == "73 ×4 469 ×4 474"  # never "73×469×474"
