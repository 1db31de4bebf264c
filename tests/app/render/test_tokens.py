"""app.render.tokens: the token chips, their tooltips' data and the inspector."""

import json

from app.render import tokens as tokens_view
from app.state.run_state import TokenView


def test_prob_color_runs_red_to_green():
    assert tokens_view.prob_color(0.0).startswith("hsl(0,")
    assert tokens_view.prob_color(1.0).startswith("hsl(120,")
    assert tokens_view.prob_color(7) == tokens_view.prob_color(1.0)


def test_token_chip_escapes_and_carries_its_top5():
    tok = TokenView("<b>", 0.25, [("<b>", 0.25), (" a", 0.2), ("\n", 0.1)], "decode")
    chip = tokens_view.token_html(tok, 3)
    assert "<b>" not in chip and "&lt;b&gt;" in chip
    data = tokens_view.tooltip_data(tok, 3)
    assert data["i"] == "3" and data["ph"] == "decode" and float(data["p"]) == 0.25
    assert json.loads(data["top"]) == [["<b>", 0.25], [" a", 0.2], ["\n", 0.1]]
    assert json.loads(data["tt"]) == "<b>"
    assert 'data-top="[[&quot;&lt;b&gt;&quot;, 0.25]' in chip  # attribute values are escaped
    newline = tokens_view.token_html(TokenView("\n", 0.9, [], "decode"), 1)
    assert "↵<br>" in newline


def test_byte_pieces_show_the_completed_character():
    first = TokenView("\ufffd", 0.5, [("\ufffd", 0.5)], "decode", True, "")
    last = TokenView("\ufffd", 0.9, [("\ufffd", 0.9)], "decode", True, "加")
    assert tokens_view.chip_text(first) == "·" and tokens_view.chip_text(last) == "加"
    assert tokens_view.tooltip_data(first, 1)["piece"] == "1" and "done" not in tokens_view.tooltip_data(first, 1)
    assert tokens_view.tooltip_data(last, 2)["done"] == "1"
    html = tokens_view.tokens_html([first, last])
    assert "加" in html and "tok-piece" in html
    special = TokenView("<|im_end|>", 0.99, [], "decode", False, "")
    assert "tok-special" in tokens_view.token_html(special, 1)


def test_tooltip_script_reads_the_chip_attributes():
    js = tokens_view.TOOLTIP_JS
    for key in ("d.p", "d.tt", "d.top", "d.i", "d.ph", "d.piece", "d.done", "outside the top 5"):
        assert key in js


def test_inspector_has_legend_and_placeholder():
    assert "top-5" in tokens_view.inspector_html([])
    assert "appear here" in tokens_view.inspector_html([])
    # the chips are drawn by the script, appended as the value grows; Gradio never re-renders them
    assert "${value}" not in tokens_view.inspector_template()
    assert "tok-body" in tokens_view.inspector_template()
    assert "value.startsWith(drawn)" in tokens_view.TOOLTIP_JS and "appendChild" in tokens_view.TOOLTIP_JS
