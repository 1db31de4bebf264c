"""SamplingParams validation: bad values raise ValueError naming the field and its range."""

import pytest

from engine.params import SamplingParams


@pytest.mark.parametrize("field,value,range_text", [
    ("temperature", -0.1, ">= 0"),
    ("top_p", 0.0, "(0, 1]"),
    ("top_p", 1.5, "(0, 1]"),
    ("min_p", -0.1, "[0, 1]"),
    ("repetition_penalty", 0.0, "> 0"),
    ("max_tokens", 0, ">= 1"),
    ("top_k", -2, "-1 (off)"),
    ("presence_penalty", 3.0, "[-2, 2]"),
    ("frequency_penalty", -2.5, "[-2, 2]"),
    ("temperature", float("nan"), ">= 0"),
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
