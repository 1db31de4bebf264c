"""The page's structured output on the embedded model: the sidebar's choice becomes the
engine's structure, the chips show the mask, a bad structure is a clear message and the next
request is served, and the page builds with the sidebar's block and the lesson (the lesson's
own run: tests/app/tabs/lessons/test_constrained.py)."""

import json

import gradio as gr
import pytest

from app.render.structured import (EXAMPLES, KINDS, example_text, mask_label, remote_fields, start_text,
                                   structure_from)
from app.tabs.playground import handlers


def test_the_sidebar_choice_becomes_the_engines_structure():
    assert structure_from("none", "anything") is None
    person = structure_from("json", example_text("A person"))
    assert person == {"json": EXAMPLES["A person"], "explain": True}
    assert structure_from("regex", r"\d+") == {"regex": r"\d+", "explain": True}
    assert structure_from("choice", "yes\n\n no \n")["choice"] == ["yes", "no"]
    for kind, text, words in [("json", "{oops", "not valid JSON"), ("regex", " ", "box is empty"),
                              ("xml", "a", "kind must be")]:
        with pytest.raises(ValueError, match=words):
            structure_from(kind, text)
    assert mask_label({"allowed": 7, "vocab": 49152, "forced": False, "mass": 0.25}) == \
        "7 of 49,152 allowed; the mask removed 25.0% of the probability"
    assert "jump-forward" in mask_label({"jumped": True})
    # each kind starts from an example the engine takes (the regex and choice boxes were empty)
    for _, kind in KINDS[1:]:
        assert start_text(kind) and structure_from(kind, start_text(kind)) is not None
    assert start_text("none") == ""


@pytest.fixture(scope="module")
def pg(engine, tmp_path_factory):
    from app.state.playground import Playground

    return Playground(engine, trace_dir=tmp_path_factory.mktemp("traces"), monitor=False)


def _run(pg, kind, text, prompt="Describe a person as JSON."):
    return list(handlers.generate(pg, "structured", "chat", prompt, [], "", 0, 1.0, 0, 0.0, 1.0,
                                  40, 0, True, structure_kind=kind, structure_text=text))


def test_the_chips_show_the_mask_and_a_bad_structure_is_a_clear_message(pg):
    frames = _run(pg, "json", example_text("A person"))
    last = frames[-1]
    answer = last["history"][-1]["content"]
    assert set(json.loads(answer)) == {"name", "age"}
    chips = last["tokens"]
    assert "of 49,152 allowed" in chips and "tok-forced" in chips and "data-removed" in chips
    bad = _run(pg, "regex", "[a-z")
    assert "structured output: the Regex box: " in bad[-1]["status"] and "unclosed" in bad[-1]["status"]
    again = _run(pg, "choice", "yes\nno", prompt="Is the sky blue?")
    assert again[-1]["history"][-1]["content"] in ("yes", "no")


@pytest.mark.fast
def test_the_page_builds_with_the_structured_controls_and_the_lesson(pg):
    from app.page import build_demo

    demo = build_demo(pg)
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert {"structure-kind", "structure-example", "structure-text", "lesson-cd-run"} <= ids
    # choosing regex or choice fills the box; the examples drop-down, emptied by that choice,
    # leaves the box alone (it wiped the example the kind had just put there)
    by_id = {getattr(b, "elem_id", None): i for i, b in demo.blocks.items()}

    def on_change(elem_id):
        return next(f.fn for f in demo.fns.values()
                    if (by_id[elem_id], "change") in [tuple(t) for t in f.targets])

    for kind in ("regex", "choice"):
        assert on_change("structure-kind")(kind)[2]["value"] == start_text(kind)
    assert on_change("structure-example")(None) == gr.skip()
    assert on_change("structure-example")("A person") == example_text("A person")


def test_a_remote_server_gets_the_structure_in_the_openai_and_vllm_fields():
    from engine.params import SamplingParams

    def fields_of(structure):
        return remote_fields(SamplingParams(structured_outputs=structure).structured_outputs)

    assert fields_of(None) == {}
    assert fields_of({"json": {"type": "object"}, "explain": True}) == {"response_format": {
        "type": "json_schema", "json_schema": {"name": "structure", "schema": {"type": "object"}}}}
    assert fields_of({"json_object": True}) == {"response_format": {"type": "json_object"}}
    assert fields_of({"choice": ["a", "b"]}) == {"structured_outputs": {"choice": ["a", "b"]}}
