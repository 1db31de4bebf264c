"""Refusals of the API name the field the client sent (never one the route does not have),
with both numbers where a length is at fault; a keyed server checks the key before the body."""

from __future__ import annotations

import json

import httpx
import pytest

from engine.serve.app import create_server
from tests.support.servers import app_in_thread

MODEL = "smollm2-135m"


def error(r) -> dict:
    assert r.status_code == 400, r.text
    return r.json()["error"]


@pytest.mark.parametrize("route, needed", [("/v1/chat/completions", "messages"),
                                           ("/v1/completions", "prompt")])
def test_empty_body_names_what_is_required(api, route, needed):
    e = error(httpx.post(api + route, content=b"", timeout=60,
                         headers={"content-type": "application/json"}))
    assert "None" not in e["message"] and needed in e["message"] and e["param"] == "model"


@pytest.mark.parametrize("body", [[1, 2], "text", 3])
def test_a_body_that_is_not_an_object_says_so(api, body):
    e = error(httpx.post(api + "/v1/chat/completions", json=body, timeout=60))
    assert e["message"] == "the request body must be a JSON object" and e["param"] is None


def test_stream_takes_a_json_boolean_only(api):
    e = error(httpx.post(api + "/v1/completions", timeout=60, json={
        "model": MODEL, "prompt": "Hi", "max_tokens": 2, "stream": "yes"}))
    assert e["param"] == "stream", e


@pytest.mark.parametrize("messages, param", [
    ([{"role": "user", "content": ""}], "messages[0].content"),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  "}],
     "messages[1].content"),
    ([{"role": "system", "content": "Be brief."}], "messages[0].content"),
    ([{"role": "user", "content": "Hi"}, {"role": "user", "content": "a\ud800b"}],
     "messages[1].content"),
])
def test_chat_refusals_name_the_message(api, messages, param):
    body = json.dumps({"model": MODEL, "messages": messages, "max_tokens": 2})  # \ud800 escaped
    e = error(httpx.post(api + "/v1/chat/completions", timeout=60, content=body,
                         headers={"content-type": "application/json"}))
    assert e["param"] == param, e
    assert not e["message"].startswith("prompt")


def test_a_prompt_alone_too_long_names_the_prompt_with_both_numbers(api, engine):
    ctx = engine.max_seq_tokens
    e = error(httpx.post(api + "/v1/completions", timeout=120, json={
        "model": MODEL, "prompt": "word " * (ctx + 10), "max_tokens": 5}))
    assert e["param"] == "prompt", e
    assert str(ctx + 11) in e["message"] and str(ctx) in e["message"]
    e = error(httpx.post(api + "/v1/chat/completions", timeout=120, json={
        "model": MODEL, "messages": [{"role": "user", "content": "word " * (ctx + 10)}],
        "max_tokens": 5}))
    assert e["param"] == "messages" and str(ctx) in e["message"], e
    assert not e["message"].startswith("prompt")
    # prompt plus max_tokens over the context: that is max_tokens's fault, both numbers named
    e = error(httpx.post(api + "/v1/completions", timeout=120, json={
        "model": MODEL, "prompt": "word " * 100, "max_tokens": ctx}))
    assert e["param"] == "max_tokens" and "101" in e["message"] and str(ctx) in e["message"]


@pytest.mark.fast
def test_keyed_server_answers_401_before_judging_the_body(engine):
    app = create_server(engine, api_key="s3cret")
    try:
        with app_in_thread(app) as url:
            for body in (b"{not json", b"", b'{"model": 1}'):
                r = httpx.post(url + "/v1/chat/completions", content=body, timeout=60,
                               headers={"content-type": "application/json"})
                assert r.status_code == 401, (body, r.text)
                assert r.json()["error"]["code"] == "invalid_api_key"
            r = httpx.post(url + "/v1/chat/completions", content=b"{not json", timeout=60,
                           headers={"content-type": "application/json",
                                    "Authorization": "Bearer s3cret"})
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    finally:
        app.state.metrics.detach()
