"""The sidebar's settings reach Generate as one value (app.tabs.playground.settings)."""

from __future__ import annotations

import json

import pytest

from app.page import build_demo
from app.state.playground import Playground
from app.tabs.playground import settings
from tests.support.fakes import FakeEngine
from tests.support.gradio_queue import generate_payload


def test_a_value_names_only_the_sidebars_fields():
    defaults = {name: 0 for name in settings.NAMES}
    got = settings.parse(json.dumps({"temperature": 0.5, "mode": "raw"}), defaults)
    assert got["temperature"] == 0.5 and got["mode"] == "raw" and got["seed"] == 0
    with pytest.raises(ValueError, match="no field 'colour'"):
        settings.parse(json.dumps({"colour": 1}), defaults)
    for bad in ("[1, 2]", "{", 7, None, "x" * (settings.LIMIT + 1)):
        with pytest.raises(ValueError, match="settings must be a JSON object"):
            settings.parse(bad, defaults)
    assert json.loads(settings.replaced('{"seed": -1, "mode": "chat"}', seed=3)) == {"seed": 3, "mode": "chat"}
    with pytest.raises(ValueError, match="no field"):
        settings.replaced("{}", colour=1)


def test_generate_takes_the_sidebar_as_one_input_joined_in_the_browser(tmp_path):
    demo = build_demo(Playground(FakeEngine(), trace_dir=tmp_path, monitor=False))
    gen = next(f for f in demo.fns.values() if f.name == "on_generate")
    ids = [getattr(c, "elem_id", None) for c in gen.inputs]
    # the conversation and what the page timer sent last are server States
    assert ids == ["prompt", None, "completion", None, "settings"]
    box = gen.inputs[-1]
    assert json.loads(box.value) == {
        "mode": "chat", "system_prompt": None, "temperature": 0.7, "top_p": 0.95, "top_k": 50,
        "min_p": 0.0, "rep_penalty": 1.1, "max_tokens": 256, "seed": -1, "use_kv": True,
        "structure_kind": "none", "structure_text": ""}
    join = [f for f in demo.fns.values() if f.js == settings.JOIN_JS]
    assert len(join) == 1 and join[0].fn is None and join[0].outputs == [box]  # no server step
    assert len(join[0].inputs) == len(settings.NAMES) and len(join[0].targets) == len(settings.NAMES)


def test_a_bad_settings_value_is_refused_by_name(tmp_path):
    """A client of the queue API sending a field the sidebar lacks gets a refusal naming it, and
    the page keeps serving."""
    from tests.support.gradio_queue import fn_index, queue_call
    from tests.support.servers import launch

    pg = Playground(FakeEngine(), trace_dir=tmp_path, monitor=False)
    demo, url = launch(pg)
    try:
        index = fn_index(demo, "on_generate", "prompt")
        data = generate_payload(demo, index, [], Prompt="Hi")
        data[-1] = json.dumps({"temprature": 0})
        text = json.dumps(queue_call(url, index, data))
        assert "no field" in text and "temprature" in text and "Traceback" not in text
        text = json.dumps(queue_call(url, index, generate_payload(demo, index, [], Prompt="Hi", temperature=0)))
        assert "Finished" in text
    finally:
        demo.close()
        pg.close()
