"""Every field a client sends is checked up front, and refusals name it; the REST route fills
in the defaults of arguments left out.

The page runs in this process on 127.0.0.1 around a fake engine (``tests.support.fakes``),
so these tests need no model.
"""

from __future__ import annotations

import json
import re

import pytest

from app.state.playground import Playground
from tests.support.fakes import FakeEngine
from tests.support.gradio_queue import rest_call
from tests.support.servers import launch


# ---- 7. every field checked up front, the REST route fills in defaults ---------------------
@pytest.mark.parametrize("kwargs,message", [
    ({"prompt": "Hi \ud800 there"}, r"prompt contains a lone surrogate \(U\+D800\) at character 3"),
    ({"prompt": "Hi", "system_prompt": "Be \udfff"}, r"system_prompt contains a lone surrogate"),
    ({"prompt": "Hi", "temperature": 10**400}, r"temperature must be a number of a sensible size, "
                                               r"got a 401-digit integer"),
    ({"prompt": "Hi", "seed": 10**400}, r"seed must be an integer in \[-2\*\*63, 2\*\*63\)"),
    ({"prompt": "Hi", "max_tokens": "12"}, r"max_tokens must be an integer, got '12'"),
    ({"prompt": "Hi", "system_prompt": 5}, r"system_prompt must be a string, got int"),
    ({"prompt": "Hi", "system_prompt": {"role": "system"}}, r"system_prompt must be a string, got dict"),
    ({"prompt": ["Hi"]}, r"prompt must be a string, got list"),
    ({"prompt": "Hi", "raw": "no"}, r"raw must be true or false, got 'no'"),
    ({"prompt": "Hi", "raw": 1}, r"raw must be true or false, got 1"),
    ({"prompt": "Hi", "use_kv_cache": "off"}, r"use_kv_cache must be true or false, got 'off'"),
    ({"prompt": "Hi", "use_kv_cache": None}, r"use_kv_cache must be true or false, got None"),
])
def test_api_refuses_bad_fields_up_front_naming_them(served, kwargs, message):
    """Sent as raw JSON (``"\\ud800"`` escapes included) to ``/gradio_api/call/generate``."""
    from app.server.launch import api_defaults

    demo, url, _, eng = served
    names = ["prompt", "temperature", "top_p", "top_k", "repetition_penalty", "max_tokens", "seed", "min_p",
             "system_prompt", "raw", "use_kv_cache"]
    data = [kwargs.get(n, d) for n, d in zip(names, api_defaults(demo)["generate"])]
    event, text = rest_call(url, data)
    assert event == "error" and re.search(message, json.loads(text)["error"]), text
    assert "TextEncodeInput" not in text and "int too large" not in text and len(text) < 300
    assert not eng.submitted  # refused before the engine


def test_api_takes_true_and_false_strictly(served):
    from gradio_client import Client

    _, url, _, eng = served
    client = Client(url, verbose=False)
    client.predict(prompt="Hi", raw="false", use_kv_cache="false", api_name="/generate")
    client.predict(prompt="Hi", raw="TRUE", use_kv_cache=True, api_name="/generate")
    assert [(raw, kv) for _, _, raw, kv in eng.submitted] == [(False, False), (True, True)]
    assert eng.submitted[0][0] == [{"role": "user", "content": "Hi"}]  # "false" is not raw


@pytest.mark.parametrize("over,message", [
    ({"message": "\ud800"}, "prompt contains a lone surrogate"),
    ({"system_prompt": ["x"]}, "system_prompt must be a string"),
    ({"use_kv_cache": "maybe"}, "use_kv_cache must be true or false"),
    ({"temperature": 10**400}, "temperature must be a number of a sensible size"),
    ({"mode": "other"}, "mode must be chat or raw"),
])
def test_page_generate_refuses_bad_fields_naming_them(tmp_path, over, message):
    from app.tabs.playground import handlers

    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    args = dict(mode="chat", message="Hi", history=[], system_prompt="", temperature=0.7, top_p=1.0,
                top_k=0, min_p=0.0, repetition_penalty=1.0, max_tokens=8, seed=-1, use_kv_cache=True)
    args.update(over)
    notes = []
    frames = list(handlers.generate(pg, "sess", notify=notes.append, **args))
    assert len(frames) == 1 and frames[0]["busy"] is False
    assert notes and message in notes[0] and len(notes[0]) < 300
    assert not eng.submitted


def test_rest_call_fills_in_the_optional_arguments_left_out(served):
    _, url, _, eng = served
    event, data = rest_call(url, ["Hi"])
    assert event == "complete" and json.loads(data) == ["Hello, world!"]
    event, data = rest_call(url, ["Hi", 0, 1.0, 0, 1.0, 7])  # prompt .. max_tokens, the rest defaults
    assert event == "complete"
    (_, p1, raw1, kv1), (_, p2, raw2, kv2) = eng.submitted
    assert (p1.temperature, p1.top_p, p1.top_k, p1.max_tokens, p1.seed) == (0.7, 1.0, 0, 256, None)
    assert (p2.temperature, p2.max_tokens) == (0.0, 7) and raw1 is raw2 is False and kv1 is kv2 is True
    event, data = rest_call(url, [])  # nothing at all: the missing prompt is named
    assert event == "error" and json.loads(data)["error"] == "prompt is required"
    assert rest_call(url, [], "stats")[0] == "complete"


@pytest.mark.parametrize("over,message", [
    ({"prompt": "\ud800"}, "prompt contains a lone surrogate"),
    ({"temperature": 10**400}, "temperature must be a number of a sensible size"),
    ({"seed": "7"}, "seed must be an integer"),
    ({"top_k": 2.5}, "top_k must be an integer"),
])
def test_sampling_explorer_refuses_bad_fields_naming_them(over, message):
    import gradio as gr

    from app.tabs.lessons.sampling import explorer_generate

    eng = FakeEngine()
    args = dict(prompt="Hi", temperature=0.8, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    args.update(over)
    with pytest.raises(gr.Error, match=message):
        explorer_generate(eng, **args)
    assert not eng.submitted
