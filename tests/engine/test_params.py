"""SamplingParams validation: bad values raise ValueError naming the field and its range."""

import pytest

from engine.params import SamplingParams


@pytest.mark.parametrize("field,value,range_text", [
    ("temperature", -0.1, "[0, 100]"),
    ("temperature", 1e20, "[0, 100]"),
    ("top_p", 0.0, "(0, 1]"),
    ("top_p", 1.5, "(0, 1]"),
    ("min_p", -0.1, "[0, 1]"),
    ("repetition_penalty", 0.0, "[0.01, 100]"),
    ("repetition_penalty", 1e-300, "[0.01, 100]"),
    ("repetition_penalty", 1e30, "[0.01, 100]"),
    ("max_tokens", 0, ">= 1"),
    ("top_k", -2, "-1 (off)"),
    ("presence_penalty", 3.0, "[-2, 2]"),
    ("frequency_penalty", -2.5, "[-2, 2]"),
    ("temperature", float("nan"), "[0, 100]"),
    ("seed", -1, "[0, 2**63)"),
])
def test_invalid_values_name_field_and_range(field, value, range_text):
    with pytest.raises(ValueError) as err:
        SamplingParams(**{field: value})
    assert field in str(err.value) and range_text in str(err.value)


def test_wrong_types_are_refused():
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=2.5)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature="hot")
    with pytest.raises(ValueError, match="top_k"):
        SamplingParams(top_k=True)


def test_defaults_and_normalisation():
    p = SamplingParams(stop="END", temperature=0)
    assert p.stop == ["END"] and p.greedy
    assert SamplingParams(top_k=-1).top_k == -1
    assert SamplingParams(max_tokens=None).max_tokens is None
    assert not SamplingParams().greedy


def test_refused_values_are_never_echoed_whole():
    huge = "x" * 900_000
    for kw in ({"stop": 5}, {"stop": [huge, 3]}, {"stop_token_ids": huge},
               {"stop_token_ids": list(range(100_000))}, {"temperature": huge}):
        with pytest.raises(ValueError) as err:
            SamplingParams(**kw)
        assert len(str(err.value)) < 200, (list(kw), len(str(err.value)))


def test_the_highest_temperature_and_penalties_are_accepted():
    SamplingParams(temperature=100, repetition_penalty=0.01)
    SamplingParams(temperature=100, repetition_penalty=100)
