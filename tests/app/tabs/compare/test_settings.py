"""The Compare tab's settings, presets and pictures, without a model."""

import json

import pytest

from app.render import compare as view
from app.state.run_state import TokenView
from app.tabs.compare.events import preset_values, side_dict
from app.tabs.compare.layout import SIDE_FIELDS
from app.tabs.compare.presets import PRESETS, shown_presets
from app.tabs.compare.settings import DEFAULTS, FIELDS, parse_side


def test_missing_fields_take_the_defaults_and_max_tokens_fills_in():
    s = parse_side("left", {"temperature": 1, "seed": -1}, max_tokens=32)
    assert s.temperature == 1.0 and s.seed is None and s.max_tokens == 32 and s.weights == "auto"
    assert parse_side("right", {"max_tokens": 8}, max_tokens=32).max_tokens == 8
    assert parse_side("left", None) == DEFAULTS


@pytest.mark.parametrize("side,value,expect", [
    ("right", {"weights": "int3"}, "right.weights must be one of auto, int4, bf16, fp32, got 'int3'"),
    ("left", {"kv_cache_dtype": "fp4"}, "left.kv_cache_dtype must be one of auto, bf16, fp8"),
    ("left", {"prefix_cache": "hot"}, "left.prefix_cache must be one of cold, warm"),
    ("right", {"temperature": "hot"}, "right.temperature must be a number"),
    ("right", {"temperature": 500}, "right.temperature must be in [0, 100]"),
    ("left", {"top_p": 0}, "left.top_p must be in (0, 1]"),
    ("left", {"max_tokens": 0}, "left.max_tokens must be in [1, 1024]"),
    ("left", {"use_kv_cache": "no"}, "left.use_kv_cache must be true or false"),
    ("left", {"tempreature": 1}, "left.tempreature is not a setting"),
    ("right", {"json_schema": "{not json"}, "right.json_schema is not a usable schema"),
    ("right", {"speculative": True, "use_kv_cache": False}, "right.speculative needs use_kv_cache"),
    ("right", {"engine": "remote"}, "right.engine must be one of local"),
    ("left", [1, 2], "left must be a JSON object"),
])
def test_bad_settings_are_refused_naming_side_and_field(side, value, expect):
    with pytest.raises(ValueError) as err:
        parse_side(side, value)
    assert str(err.value).startswith(expect)


def test_a_remote_server_compares_sampling_settings_only():
    assert parse_side("left", {"temperature": 0.5, "seed": 3}, remote=True).seed == 3
    with pytest.raises(ValueError, match="^right.weights needs this page's own engine"):
        parse_side("right", {"weights": "int4"}, remote=True)
    with pytest.raises(ValueError, match="^left.speculative needs"):
        parse_side("left", {"speculative": True}, remote=True)
    assert parse_side("right", {"engine": "remote"}, peer=True).engine == "remote"


def test_presets_shown_for_each_kind_of_page():
    local = {p.key for p in shown_presets(remote=False, peer=False)}
    assert local == {p.key for p in PRESETS} - {"local_remote"}
    assert "local_remote" in {p.key for p in shown_presets(remote=False, peer=True)}
    assert {p.key for p in shown_presets(remote=True, peer=False)} == {"greedy_sampling"}
    for p in PRESETS:  # every preset's sides are valid settings
        flags = dict(peer=p.peer)
        parse_side("left", p.left, **flags), parse_side("right", p.right, **flags)


def test_a_preset_fills_every_side_component_and_round_trips():
    p = next(p for p in PRESETS if p.key == "greedy_sampling")
    values = preset_values(p)
    n = len(SIDE_FIELDS)
    assert len(values) == 2 + 2 * n and "what" not in values[1]
    left, right = side_dict(values[2:2 + n]), side_dict(values[2 + n:])
    assert parse_side("left", left).temperature == 0 and parse_side("left", left).seed is None
    assert parse_side("right", right).temperature == 1.0 and parse_side("right", right).seed == 0
    assert set(SIDE_FIELDS) == set(FIELDS)


def test_first_diff():
    assert view.first_diff([1, 2, 3], [1, 2, 3]) is None
    assert view.first_diff([1, 2, 3], [1, 5, 3]) == 1
    assert view.first_diff([1, 2], [1, 2, 3]) == 2
    assert view.first_diff([1, 2], [1, 2, 3], finished=False) is None


def _tok(text):
    return TokenView(text, 0.5, [(text, 0.5)], "decode")


def test_chips_mark_where_the_answers_part_and_otherwise_only_grow():
    chips = view.DiffChips()
    a = chips.html([_tok("a"), _tok("b")])
    b = chips.html([_tok("a"), _tok("b"), _tok("c")])
    assert b.startswith(a) and "tok-diff" not in b
    c = chips.html([_tok("a"), _tok("b"), _tok("c")], mark=1)
    assert c.count("tok-diff") == 1 and c.index("tok-diff") > c.index(">a<")


def test_figures_and_table_hold_both_sides():
    lat = view.latency_figure({"left": [0.2, 0.25, 0.3], "right": [0.1, 0.3]})
    assert [t["name"] for t in lat.traces] == ["Left", "Right"]
    assert lat.traces[0]["x"] == [1, 2, 3] and lat.traces[0]["y"] == pytest.approx([200, 50, 50])
    assert lat.traces[0]["line"]["color"] != lat.traces[1]["line"]["color"]
    kv = view.kv_figure({"left": ([10, 11], [100, 110]), "right": ([10], [50])})
    assert kv.traces[1]["y"] == [50]
    html = view.table_html({"left": {"ttft_s": 0.25, "weight_bytes": 94_835_584, "first_diff": 2},
                            "right": {"ttft_s": None}})
    assert "TTFT" in html and "94.8 MB" in html and "#3" in html and "–" in html
    json.dumps(lat.to_plotly_json())


def test_a_side_summarises_what_differs_from_the_defaults():
    assert parse_side("left", {}).summary() == "defaults (greedy)"
    assert parse_side("right", {"temperature": 1.0, "seed": 0}).summary() == "temperature 1, seed 0"
    assert parse_side("right", {"json_schema": "{}", "weights": "int4"}).summary() == "weights int4, json_schema"
