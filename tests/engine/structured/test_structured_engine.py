"""Structured output on the embedded model: every answer follows its structure (greedy and
several seeds), free rows are untouched, samples and beams validate, bad input is refused."""

import json
import re

import jsonschema
import pytest

from engine import SamplingParams
from engine.structured import StructuredOutputError
from tests.support.parity import assert_same_or_tie

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
COLORS = {"type": "array", "minItems": 1, "maxItems": 3,
          "items": {"type": "string", "enum": ["red", "green", "blue", "yellow"]}}
SETTINGS = [dict(temperature=0)] + [dict(temperature=0.9, seed=s) for s in (1, 2, 3)]


def run(engine, prompt, structure, max_tokens=40, **kw):
    return engine.generate(prompt, SamplingParams(max_tokens=max_tokens,
                                                  structured_outputs=structure, **kw))


@pytest.mark.parametrize("kw", SETTINGS)
def test_json_schema_answers_parse_and_validate(engine, kw):
    out = run(engine, "Describe a person as JSON.", {"json": PERSON}, **kw)
    assert out.finish_reason == "stop"
    jsonschema.validate(json.loads(out.text), PERSON)
    assert out.token_ids[-1] in engine.loaded.eos_token_ids  # a complete structure ends with EOS
    assert out.structured["forced_tokens"] >= 1  # '{"' opens every answer


@pytest.mark.parametrize("kw", SETTINGS[:3])
def test_regex_choice_grammar_and_json_object(engine, kw):
    out = run(engine, "Give me a phone number.", {"regex": r"\d{3}-\d{4}"}, **kw)
    assert re.fullmatch(r"\d{3}-\d{4}", out.text), out.text
    choices = ["yes", "no", "maybe"]
    out = run(engine, "Is the sky green?", {"choice": choices}, **kw)
    assert out.text in choices and out.finish_reason == "stop"
    out = run(engine, "Pick a fruit.", {"grammar": 'root ::= "apple" | "pear" | "plum" " pie"?'}, **kw)
    assert out.text in ("apple", "pear", "plum", "plum pie"), out.text
    out = run(engine, "Give me any JSON object with one key.", {"json_object": True},
              max_tokens=60, **kw)
    if out.finish_reason == "stop":  # a small model may ramble to max_tokens inside a string
        assert isinstance(json.loads(out.text), dict)
    else:
        assert out.text.startswith("{")


def test_a_structure_that_admits_any_text_gives_the_plain_greedy_tokens(engine):
    greedy = SamplingParams(temperature=0, max_tokens=24)
    plain = engine.generate("Name three rivers.", greedy)
    free = run(engine, "Name three rivers.", {"regex": r"(?s:.*)"}, max_tokens=24, temperature=0)
    assert free.token_ids == plain.token_ids
    assert free.structured["forced_tokens"] == 0


def test_free_rows_batched_with_structured_rows_keep_their_solo_tokens(engine, loaded):
    prompts = ["Tell me one fact about owls.", "Tell me one fact about comets."]
    greedy = SamplingParams(temperature=0, max_tokens=24)
    solo = [engine.generate(p, greedy).token_ids for p in prompts]
    handles = []
    for i, p in enumerate(prompts):
        handles.append(engine.submit("Describe a person as JSON.", SamplingParams(
            temperature=0.9, seed=i, max_tokens=40, structured_outputs={"json": PERSON})))
        handles.append(engine.submit(p, greedy))
    outs = [h.result(300) for h in handles]
    assert max(e.batch_size for h in handles for e in h.events) >= 2
    for p, want, got in zip(prompts, solo, outs[1::2]):
        assert_same_or_tie(loaded, p, want, got.token_ids)
        assert got.structured is None and not any(e.forced for e in handles[1].events)
    for o in outs[0::2]:
        jsonschema.validate(json.loads(o.text), PERSON)


def test_samples_and_beams_with_a_schema_all_validate(engine):
    h = engine.submit("List some colors.", SamplingParams(
        max_tokens=40, structured_outputs={"json": COLORS}, temperature=1.0, seed=7, n=3))
    out = h.result(300)
    assert len(out.outputs) == 3
    assert {e.index for e in h.events if e.forced} == {0, 1, 2}  # '["' opens every sample
    for o in out.outputs:
        jsonschema.validate(json.loads(o.text), COLORS)
    out = run(engine, "List some colors.", {"json": COLORS}, temperature=0, num_beams=3, n=3)
    assert len(out.outputs) == 3
    for o in out.outputs:
        jsonschema.validate(json.loads(o.text), COLORS)


def test_forced_tokens_are_marked_and_jumped_without_a_forward_pass(engine):
    h = engine.submit("Describe a person as JSON.", SamplingParams(
        temperature=0, max_tokens=40, structured_outputs={"json": PERSON}))
    out = h.result(120)
    jumped = [e for e in h.events if e.jumped]
    assert jumped and all(e.forced and e.allowed_tokens is None for e in jumped)
    assert "".join(e.token_text for e in jumped[:1]) == "name"  # '{"' then the only key
    sampled = [e for e in h.events if not e.jumped]
    assert all(e.allowed_tokens >= 1 for e in sampled)
    assert any(e.allowed_tokens > 1000 for e in sampled)  # inside a string most tokens pass
    # every jumped token rode along with the pass of the token before it
    assert len({(e.start_s, e.end_s) for e in h.events}) == len(sampled)
    assert out.structured["jump_forward_tokens"] == len(jumped)
    # the pass that feeds a sampled token and the forced ones after it is a decode step
    prefill = (h.events[0].start_s, h.events[0].end_s)
    later = [e.phase for e in h.events if (e.start_s, e.end_s) != prefill]
    assert later and set(later) == {"decode"}


def test_speculative_requests_turn_drafting_off_and_give_the_same_tokens(engine):
    params = SamplingParams(temperature=0, max_tokens=40, structured_outputs={"json": PERSON})
    plain = engine.generate("Describe a person as JSON.", params)
    spec = engine.generate("Describe a person as JSON.", params, speculative="ngram")
    assert spec.token_ids == plain.token_ids
    assert "structured output" in spec.speculative["off_reason"]
    assert spec.speculative["drafted"] == 0


@pytest.mark.fast
@pytest.mark.parametrize("structure, field", [
    ({"json": {"type": 5}}, "structured_outputs.json"),
    ({"json": "{not json"}, "structured_outputs.json"),
    ({"regex": "[a-z"}, "structured_outputs.regex"),
    ({"choice": []}, "structured_outputs.choice"),
    ({"choice": ["a", 3]}, "structured_outputs.choice[1]"),
    ({"grammar": 'root ::= "yes'}, "structured_outputs.grammar"),
    ({"regex": "a", "choice": ["a"]}, "structured_outputs"),
    ({"pattern": "a"}, "structured_outputs"),
])
def test_bad_structures_name_their_field_and_the_engine_keeps_serving(engine, structure, field):
    with pytest.raises(StructuredOutputError) as info:
        engine.submit("Hi", SamplingParams(max_tokens=4, structured_outputs=structure))
    assert info.value.field == field and str(info.value).startswith(field)
    assert isinstance(info.value, ValueError)
    out = run(engine, "Is the sky green?", {"choice": ["yes", "no"]}, temperature=0)
    assert out.text in ("yes", "no")


def test_ignore_eos_with_a_structure_is_refused():
    with pytest.raises(ValueError, match="ignore_eos"):
        SamplingParams(ignore_eos=True, structured_outputs={"regex": "a"})


def test_grammars_are_cached_by_structure(engine):
    stats = engine.structured.compiler.stats
    reordered = dict(reversed(list(PERSON.items())))  # the same schema, keys in another order
    before = stats.hits
    run(engine, "Describe a person as JSON.", {"json": reordered}, max_tokens=4, temperature=0)
    assert stats.hits == before + 1


def test_abort_frees_the_matcher(engine):
    h = engine.submit("Write a long story as JSON.", SamplingParams(
        temperature=1.0, seed=5, max_tokens=200,
        structured_outputs={"json": {"type": "object", "properties": {"story": {"type": "string"}}}}))
    seq = next(s for s in engine.scheduler.all_sequences() if s.request_id == h.request_id)
    next(iter(h))  # it runs
    h.abort()
    out = h.result(60)
    assert out.finish_reason == "abort"
    assert seq.structured.matcher is None


def test_one_at_a_time_and_no_cache_paths_mask_without_jumping(loaded, engine):
    from engine.engine import LLMEngine

    eng = LLMEngine(loaded, batching=False)
    try:
        runs = [eng.submit("Describe a person as JSON.", SamplingParams(
            temperature=0, max_tokens=40, structured_outputs={"json": PERSON}))]
        runs.append(engine.submit("Describe a person as JSON.", SamplingParams(
            temperature=0, max_tokens=40, structured_outputs={"json": PERSON}),
            use_kv_cache=False))
        for h in runs:
            out = h.result(300)
            jsonschema.validate(json.loads(out.text), PERSON)
            assert out.structured["jump_forward_tokens"] == 0 and not any(e.jumped for e in h.events)
            assert out.structured["forced_tokens"] >= 3  # '{"', 'name', ... each had one choice
            assert sum(e.forced for e in h.events) == out.structured["forced_tokens"]
    finally:
        eng.shutdown()


def test_explain_records_what_the_mask_removed(engine):
    h = engine.submit("Describe a person as JSON.", SamplingParams(
        temperature=0, max_tokens=40, structured_outputs={"json": PERSON, "explain": True}))
    h.result(120)
    sampled = [e for e in h.events if not e.jumped]
    assert all(e.mask_detail["vocab_size"] == 49152 for e in h.events)
    assert all(0.0 <= e.mask_detail["removed_mass"] <= 1.0 for e in sampled)
    first = sampled[0]  # the model would rather not open with '{"' at all
    assert first.mask_detail["removed_mass"] > 0.5 and first.mask_detail["removed_top"]
    text, p = first.mask_detail["removed_top"][0]
    assert isinstance(text, str) and 0 < p <= first.mask_detail["removed_mass"] + 1e-6


def test_grammars_compile_on_the_callers_thread_not_the_engines(engine, monkeypatch):
    import threading

    compiler = engine.structured.compiler
    real, seen = compiler._compile, []

    def spy(params):
        seen.append(threading.current_thread().name)
        return real(params)

    monkeypatch.setattr(compiler, "_compile", spy)
    out = run(engine, "Give two digits.", {"regex": "[0-9]{2}(-[0-9])?"}, max_tokens=8,
              temperature=0)
    assert re.fullmatch("[0-9]{2}(-[0-9])?", out.text)
    assert seen == [threading.current_thread().name] and "llm-engine" not in seen
