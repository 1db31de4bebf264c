"""The API's refusals of structures and sampling values it cannot serve: each a 400 naming
the field, quickly, without the server's internal state or the whole value in the message;
bodies parsed and checked off the event loop, and one compile for identical structures sent
at once."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from engine.serve.protocol import ChatCompletionRequest

MODEL = "smollm2-135m"


def post(api, **fields) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
            "temperature": 0, **fields}
    return httpx.post(api + "/v1/chat/completions", content=json.dumps(body), timeout=120,
                      headers={"content-type": "application/json"})


def refused(r, param: str) -> dict:
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == param, err
    assert len(err["message"]) < 700 and "<state>" not in err["message"], err["message"][:300]
    return err


@pytest.mark.parametrize("fields, param", [
    ({"guided_json": "[" * 100_000}, "guided_json"),
    ({"guided_json": json.loads('{"a":' * 200 + "1" + "}" * 200)}, "guided_json"),
    ({"guided_json": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}},
     "guided_json"),
    ({"guided_json": {"$ref": "#"}}, "guided_json"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
        "$ref": "#/$defs/a"}}}}, "response_format.json_schema.schema"),
    ({"guided_regex": "((a{100}){100}){100}"}, "guided_regex"),
    ({"guided_regex": "[^\\s\\S]"}, "guided_regex"),
    ({"guided_grammar": 'start: %json {"$ref": "#"}'}, "guided_grammar"),
    ({"repetition_penalty": 1e-300, "temperature": 1}, "repetition_penalty"),
    ({"temperature": 1e25, "guided_choice": ["a", "b"]}, "temperature"),
    ({"max_tokens": "5"}, "max_tokens"),
    ({"prompt_logprobs": 1}, "prompt_logprobs"),
    ({"stop_token_ids": [10**9]}, "stop_token_ids"),
    ({"stop_token_ids": ["a"]}, "stop_token_ids[0]"),
    ({"guided_choice": ["a", ["x" * 900_000]]}, "guided_choice[1]"),
    ({"structured_outputs": {"regex": "a", "disable_any_whitespace": "x" * 900_000}},
     "structured_outputs.disable_any_whitespace"),
])
def test_refusals_name_the_field_quickly_and_briefly(api, fields, param):
    start = time.perf_counter()
    refused(post(api, **fields), param)
    assert time.perf_counter() - start < 5.0
    assert post(api, guided_choice=["yes", "no"]).status_code == 200


def test_a_body_nested_too_deeply_for_the_parser_names_its_field(api):
    body = '{"model": "%s", "messages": [{"role": "user", "content": "Hi"}], "guided_json": %s}' % (
        MODEL, "[" * 7000 + "]" * 7000)
    r = httpx.post(api + "/v1/chat/completions", content=body, timeout=60,
                   headers={"content-type": "application/json"})
    refused(r, "guided_json")


def test_valid_stop_token_ids_and_compact_json_on_request(api, engine):
    assert post(api, stop_token_ids=[engine.loaded.tokenizer.eos_token_id]).status_code == 200
    r = post(api, max_tokens=60, response_format={"type": "json_schema", "json_schema": {
        "name": "p", "schema": {"type": "object", "properties": {"name": {"type": "string",
                                                                          "maxLength": 12}},
                                "required": ["name"], "additionalProperties": False}}},
        structured_outputs={"disable_any_whitespace": True},
        messages=[{"role": "user", "content": "Describe a person as pretty-printed JSON."}])
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["message"]["content"]
    if r.json()["choices"][0]["finish_reason"] == "stop":
        assert json.dumps(json.loads(content), separators=(",", ":")) == content


def test_bodies_are_checked_off_the_event_loop(api, monkeypatch):
    seen = []
    real = ChatCompletionRequest.checked

    def spy(self):
        try:
            asyncio.get_running_loop()
            seen.append("event loop")
        except RuntimeError:
            seen.append(threading.current_thread().name)
        return real(self)

    monkeypatch.setattr(ChatCompletionRequest, "checked", spy)
    assert post(api, max_tokens=1).status_code == 200
    assert seen and "event loop" not in seen


def test_identical_structures_sent_at_once_compile_once(api, engine):
    schema = {"type": "object", "additionalProperties": False,
              "properties": {f"field_{i}_{time.time_ns()}": {"type": "string", "maxLength": 8}
                             for i in range(300)}}
    stats = engine.structured.compiler.stats
    misses = stats.misses
    answers = []

    def one():
        answers.append(post(api, max_tokens=1, guided_json=schema).status_code)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [200] * 8
    assert stats.misses - misses == 1


@pytest.mark.slow
def test_health_answers_while_heavy_structures_and_bodies_arrive(api):
    schema = {"type": "object", "properties": {
        f"p{i}_{time.time_ns()}": {"type": "string", "maxLength": 4} for i in range(1500)}}
    heavy = [dict(guided_json=schema, max_tokens=1),
             dict(guided_json={"enum": [f"v{i}" for i in range(15_000)]}, max_tokens=1),
             dict(logit_bias={str(i): 1.0 for i in range(100_000)})]
    codes, health = [], []

    def send(fields):
        codes.append(post(api, **fields).status_code)

    threads = [threading.Thread(target=send, args=(heavy[i % 3],)) for i in range(12)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        start = time.perf_counter()
        assert httpx.get(api + "/health", timeout=30).status_code == 200
        health.append(time.perf_counter() - start)
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert sorted(set(codes)) in ([200, 400], [400]), codes  # logit_bias is refused
    assert health and max(health) < 2.0, max(health)
