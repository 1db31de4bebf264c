"""Limits that keep one request from slowing or refusing everyone else: the count and length
of stop strings (engine and API), each refusal naming the field and the limit."""

from __future__ import annotations

import httpx
import pytest

from engine import SamplingParams
from engine.params import MAX_STOP_STRING_CHARS, MAX_STOP_STRINGS, MAX_STOP_TOKEN_IDS

MODEL = "smollm2-135m"


def test_stop_strings_up_to_the_limit_are_accepted():
    p = SamplingParams(stop=[f"s{i}" for i in range(MAX_STOP_STRINGS)])
    assert len(p.stop) == MAX_STOP_STRINGS
    assert SamplingParams(stop=["x" * MAX_STOP_STRING_CHARS]).stop[0] == "x" * MAX_STOP_STRING_CHARS


@pytest.mark.parametrize("kwargs, limit", [
    (dict(stop=[f"s{i}" for i in range(MAX_STOP_STRINGS + 1)]), str(MAX_STOP_STRINGS)),
    (dict(stop=[f"s{i}" for i in range(100_000)]), str(MAX_STOP_STRINGS)),
    (dict(stop=["ok", "x" * (MAX_STOP_STRING_CHARS + 1)]), str(MAX_STOP_STRING_CHARS)),
    (dict(stop_token_ids=list(range(MAX_STOP_TOKEN_IDS + 1))), str(MAX_STOP_TOKEN_IDS)),
])
def test_too_many_or_too_long_stops_are_refused_naming_the_limit(kwargs, limit):
    with pytest.raises(ValueError) as err:
        SamplingParams(**kwargs)
    field = next(iter(kwargs))
    assert str(err.value).startswith(field + " must") and limit in str(err.value)


@pytest.mark.parametrize("route, body", [
    ("/v1/completions", {"prompt": "Hi"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
])
def test_api_refuses_100000_stop_strings_naming_stop_and_the_limit(api, route, body):
    r = httpx.post(api + route, json={**body, "model": MODEL, "max_tokens": 2,
                                       "stop": [f"w{i}" for i in range(100_000)]}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "stop" and str(MAX_STOP_STRINGS) in err["message"]
    r = httpx.post(api + route, json={**body, "model": MODEL, "max_tokens": 2,
                                       "stop": "y" * (MAX_STOP_STRING_CHARS + 1)}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop"
    assert str(MAX_STOP_STRING_CHARS) in r.json()["error"]["message"]
