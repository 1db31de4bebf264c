"""Structured output through ``python -m engine serve`` on 127.0.0.1: OpenAI's
``response_format`` (with the openai SDK's ``parse`` helper and a pydantic model), vLLM's
``structured_outputs`` and ``guided_*`` fields, and 400s naming the field at fault."""

from __future__ import annotations

import json
import re
from typing import Literal

import httpx
import jsonschema
import pytest

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")



MODEL = "smollm2-135m"


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=16)
    country: Literal["France", "Italy", "Spain", "Japan"]


def chat(server, content: str, **fields) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}],
            "max_tokens": 40, "temperature": 0, **fields}
    return httpx.post(server + "/v1/chat/completions", json=body, timeout=120)


@pytest.mark.slow
def test_the_sdks_parse_helper_returns_a_pydantic_object(client):
    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    for seed in (None, 4):
        extra = {"temperature": 0} if seed is None else {"temperature": 0.9, "seed": seed}
        done = parse(model=MODEL, messages=[{"role": "user", "content": "Name a city as JSON."}],
                     response_format=City, max_tokens=40, **extra)
        city = done.choices[0].message.parsed
        assert isinstance(city, City) and city.country in ("France", "Italy", "Spain", "Japan")
        assert done.choices[0].finish_reason == "stop"


@pytest.mark.slow
def test_response_format_json_schema_and_json_object(server):
    schema = {"type": "object", "required": ["answer"], "additionalProperties": False,
              "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 100}}}
    r = chat(server, "What is 2 + 3? Reply in JSON.", response_format={
        "type": "json_schema", "json_schema": {"name": "sum", "schema": schema, "strict": True}})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), schema)
    r = chat(server, "Reply with a JSON object.", response_format={"type": "json_object"},
             max_tokens=60)
    content = r.json()["choices"][0]["message"]["content"]
    assert content.startswith("{")
    if r.json()["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(content), dict)
    r = chat(server, "Say hi.", response_format={"type": "text"}, max_tokens=8)
    assert r.status_code == 200


@pytest.mark.slow
def test_vllm_fields_structured_outputs_and_guided(server):
    options = ["red", "green", "blue"]
    r = chat(server, "Pick a colour.", structured_outputs={"choice": options})
    assert r.json()["choices"][0]["message"]["content"] in options
    r = chat(server, "Pick a colour.", guided_choice=options)
    assert r.json()["choices"][0]["message"]["content"] in options
    r = chat(server, "Give a year.", guided_regex=r"(19|20)\d\d", temperature=0.8, seed=2)
    assert re.fullmatch(r"(19|20)\d\d", r.json()["choices"][0]["message"]["content"])
    r = chat(server, "Give a word.", structured_outputs={"grammar": 'root ::= "alpha" | "beta"'})
    assert r.json()["choices"][0]["message"]["content"] in ("alpha", "beta")
    r = httpx.post(server + "/v1/completions", timeout=120, json={
        "model": MODEL, "prompt": "The answer is", "max_tokens": 12, "temperature": 0,
        "guided_json": {"type": "object", "required": ["ok"], "additionalProperties": False,
                        "properties": {"ok": {"type": "boolean"}}}})
    assert json.loads(r.json()["choices"][0]["text"])["ok"] in (True, False)


def test_a_structured_stream_streams_the_choice(client):
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Yes or no?"}], max_tokens=8,
        temperature=0, stream=True, extra_body={"guided_choice": ["yes", "no"]})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text in ("yes", "no")


@pytest.mark.slow
@pytest.mark.parametrize("fields, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}},
     "response_format.json_schema.name"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"guided_regex": "[a-z"}, "guided_regex"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_choice": ["a", 3]}, "guided_choice[1]"),
    ({"structured_outputs": {"grammar": 'root ::= "yes'}}, "structured_outputs.grammar"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
    ({"guided_regex": "a", "ignore_eos": True}, "ignore_eos"),
])
def test_a_bad_structure_is_a_400_naming_the_field_and_the_next_request_is_served(
        server, fields, param):
    r = chat(server, "Hi", **fields)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"].startswith(param), err
    assert "Traceback" not in err["message"] and "/" not in err["message"].split(":")[0]
    ok = chat(server, "Yes or no?", guided_choice=["yes", "no"], max_tokens=4)
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] in ("yes", "no")
