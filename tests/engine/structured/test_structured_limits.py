"""Structured output on the embedded model, at its limits: free but bounded JSON whitespace,
bounded numbers, ASCII digits, answers cut by ``max_tokens``, high temperatures, and the
structures that are refused (too complex, matching nothing or only endless text) quickly,
off the engine thread, with their field named."""

import json
import threading
import time

import jsonschema
import pytest

from engine import SamplingParams
from engine.structured import StructuredOutputError, StructuredOutputsParams
from engine.structured import compiler as compiler_module
from engine.structured.examples import CITIES, FIVE_STRINGS, MOOD, PERSON

PROMPTS = {"person": "Describe a person as JSON.", "cities": "List some cities as JSON.",
           "mood": "How do you feel? Answer as JSON.", "five": "Describe a book as JSON."}


def run(engine, prompt, structure, max_tokens=40, **kw):
    return engine.generate(prompt, SamplingParams(max_tokens=max_tokens,
                                                  structured_outputs=structure, **kw))


def ids(engine, text):
    return engine.loaded.tokenizer.encode(text, add_special_tokens=False)


def accepts(engine, structure, text) -> bool:
    so = StructuredOutputsParams(**structure)
    tokens = ids(engine, text)
    return engine.structured.compiler.valid_prefix(so, tokens) == len(tokens)


@pytest.mark.fast
def test_json_whitespace_is_free_but_bounded_and_compact_on_request(engine):
    pretty = json.dumps({"name": "Ada", "age": 36}, indent=2)
    assert accepts(engine, {"json": PERSON}, pretty)
    assert not accepts(engine, {"json": PERSON, "disable_any_whitespace": True}, pretty)
    assert accepts(engine, {"json": PERSON, "disable_any_whitespace": True},
                   '{"name":"Ada","age":36}')
    assert accepts(engine, {"json": PERSON}, '{' + " " * 24 + '"name":"Ada","age":36}')
    assert not accepts(engine, {"json": PERSON}, '{' + " " * 25 + '"name":"Ada","age":36}')


@pytest.mark.slow
@pytest.mark.parametrize("name, schema", [("person", PERSON), ("cities", CITIES),
                                          ("mood", MOOD), ("five", FIVE_STRINGS)])
def test_the_example_schemas_end_valid_at_greedy(engine, name, schema):
    out = run(engine, PROMPTS[name], {"json": schema}, max_tokens=160, temperature=0)
    assert out.finish_reason == "stop", out.text
    jsonschema.validate(json.loads(out.text), schema)


@pytest.mark.fast
def test_numbers_without_bounds_have_at_most_about_twenty_digits(engine):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"}}}
    assert accepts(engine, {"json": schema}, '{"n": 123456789012345678}')
    assert not accepts(engine, {"json": schema}, '{"n": 1000000000000000000000000}')
    assert accepts(engine, {"json": schema}, '{"x": 75.832413}')
    assert not accepts(engine, {"json": schema}, '{"x": 75.8324132880012878}')
    fine = {"type": "number", "multipleOf": 1e-10}
    assert accepts(engine, {"json": fine}, "75.8324132880")  # the schema says otherwise
    assert not accepts(engine, {"json_object": True}, '{"a": 1000000000000000000000000}')


def test_an_answer_cut_by_max_tokens_ends_with_length_and_the_text_so_far(engine):
    full = run(engine, PROMPTS["person"], {"json": PERSON}, max_tokens=60, temperature=0)
    cut = run(engine, PROMPTS["person"], {"json": PERSON}, max_tokens=4, temperature=0)
    assert cut.finish_reason == "length" and len(cut.token_ids) == 4
    assert full.text.startswith(cut.text) and cut.text.startswith("{")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_digits_in_a_regex_are_ascii(engine, seed):
    out = run(engine, "Give me a phone number.", {"regex": r"\d{3}-\d{4}"}, max_tokens=24,
              temperature=1.0, seed=seed)
    assert out.finish_reason == "stop"
    assert len(out.text) == 8 and all(c in "0123456789-" for c in out.text), ascii(out.text)


def test_the_mask_holds_at_the_highest_temperature(engine):
    for structure, ok in (({"choice": ["yes", "no"]}, lambda t: t in ("yes", "no")),
                          ({"regex": r"\d{3}-\d{4}"},
                           lambda t: len(t) == 8 and all(c in "0123456789-" for c in t))):
        for seed in (1, 2):
            out = run(engine, "Answer.", structure, max_tokens=16, temperature=100, seed=seed)
            assert out.finish_reason == "stop" and ok(out.text), ascii(out.text)


@pytest.mark.parametrize("structure, field", [
    ({"regex": "((a{100}){100}){100}"}, "structured_outputs.regex"),
    ({"regex": r"[^\s\S]"}, "structured_outputs.regex"),
    ({"json": {"$ref": "#"}}, "structured_outputs.json"),
    ({"json": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}},
     "structured_outputs.json"),
    ({"json": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
               "$ref": "#/$defs/a"}}, "structured_outputs.json"),
    ({"grammar": '%llguidance {}\nstart: %json {"$ref": "#"}'}, "structured_outputs.grammar"),
    ({"json": "[" * 100_000}, "structured_outputs.json"),
])
def test_structures_too_complex_or_matching_nothing_are_refused_quickly(engine, structure, field):
    start = time.perf_counter()
    with pytest.raises(StructuredOutputError) as info:
        engine.submit("Hi", SamplingParams(max_tokens=4, structured_outputs=structure))
    assert time.perf_counter() - start < 3.0
    assert info.value.field == field and "<state>" not in info.value.detail
    assert len(str(info.value)) < 400


def test_identical_structures_compile_once_while_the_others_wait(engine, monkeypatch):
    compiler = engine.structured.compiler
    real, calls = compiler._compile, []

    def slow(params):
        calls.append(1)
        time.sleep(0.3)
        return real(params)

    monkeypatch.setattr(compiler, "_compile", slow)
    so = StructuredOutputsParams(regex=r"[a-z]{3}-single-flight")
    waits = compiler.stats.waits
    threads = [threading.Thread(target=compiler.matcher_for, args=(so,)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and compiler.stats.waits - waits == 5
    bad = StructuredOutputsParams(regex="[a-z")  # a refusal reaches every waiter
    errors = []

    def try_bad():
        try:
            compiler.prepare(bad)
        except StructuredOutputError as exc:
            errors.append(exc.field)

    threads = [threading.Thread(target=try_bad) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == ["structured_outputs.regex"] * 3


def test_the_grammar_cache_is_bounded_in_bytes(engine, monkeypatch):
    compiler = engine.structured.compiler
    budget = 5 * compiler_module.MIN_ENTRY_BYTES  # room for four entries of the least size
    monkeypatch.setattr(compiler_module, "CACHE_BYTES", budget)
    monkeypatch.setattr(compiler_module, "_resident_bytes", lambda: 0)  # each at its least
    for i in range(8):
        compiler.prepare(StructuredOutputsParams(regex=f"[a-z]{{{i + 1}}}-bytes"))
    assert compiler.stats.cache_bytes <= budget
    assert sum(size for _, size in compiler._cache.values()) == compiler.stats.cache_bytes
    assert len(compiler._cache) == 4
    assert [k[1] for k in compiler._cache] == [f"[a-z]{{{i + 1}}}-bytes" for i in range(4, 8)]


def test_a_bad_regex_is_quoted_as_the_user_wrote_it(engine):
    """The refusal of a regex that does not compile quotes the user's pattern, not the ASCII
    rewrite the grammar engine was given (``\\d`` shown as ``\\d``, not ``[0-9]``)."""
    with pytest.raises(StructuredOutputError) as info:
        engine.submit("Hi", SamplingParams(max_tokens=4, structured_outputs={"regex": r"\d{3}-(\d{4}"}))
    assert info.value.field == "structured_outputs.regex"
    assert r"\d{3}-(\d{4}" in info.value.detail and "[0-9]" not in info.value.detail, info.value.detail
