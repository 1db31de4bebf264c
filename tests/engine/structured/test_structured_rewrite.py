"""Structures rewritten before llguidance sees them, without the model: ASCII ``\\d \\w \\s``,
bounded numbers, nesting depth, schemas with no finite instance, and short error values."""

import json

import pytest

from engine.params import SamplingParams
from engine.structured import StructuredOutputError, StructuredOutputsParams
from engine.structured.rewrite import (FRACTION_DIGITS, INTEGER_LIMIT, NUMBER_LIMIT,
                                       any_json_object, ascii_classes, bounded_schema)
from engine.structured.satisfiable import infinite_only, json_blocks


@pytest.mark.parametrize("regex, want", [
    (r"\d{3}-\d{4}", "[0-9]{3}-[0-9]{4}"),
    (r"[\d-]+", "[[0-9]-]+"),
    (r"\D\W\S", "[^0-9][^0-9A-Za-z_][^\\t\\n\\x0B\\x0C\\r ]"),
    (r"\w+\s", "[0-9A-Za-z_]+[\\t\\n\\x0B\\x0C\\r ]"),
    (r"\\d", r"\\d"),  # an escaped backslash, then a plain d
    (r"\\\d", r"\\[0-9]"),
    (r"a\.b\x41\p{L}", r"a\.b\x41\p{L}"),  # other escapes stay as they are
    (r"[^\s\S]", "[^[\\t\\n\\x0B\\x0C\\r ][^\\t\\n\\x0B\\x0C\\r ]]"),
])
def test_shorthand_classes_become_ascii(regex, want):
    assert ascii_classes(regex) == want


def test_numbers_get_the_bounds_they_lack_and_patterns_turn_ascii():
    schema = {"type": "object", "properties": {
        "n": {"type": "number"}, "i": {"type": "integer"},
        "ranged": {"type": "integer", "minimum": 0, "maximum": 10**30},
        "step": {"type": "number", "multipleOf": 0.25, "exclusiveMinimum": 0},
        "either": {"type": ["number", "null"]},
        "pattern": {"type": "string", "pattern": r"^\d+$"}},
        "patternProperties": {r"^\w+$": {"type": "string"}},
        "enum_data": {"enum": [{"pattern": r"\d"}]}}
    out = bounded_schema(schema)
    p = out["properties"]
    assert p["n"] == {"type": "number", "minimum": -NUMBER_LIMIT, "maximum": NUMBER_LIMIT,
                      "multipleOf": 10.0 ** -FRACTION_DIGITS}
    assert p["i"] == {"type": "integer", "minimum": -INTEGER_LIMIT, "maximum": INTEGER_LIMIT}
    assert p["ranged"] == schema["properties"]["ranged"]  # the schema says otherwise
    assert p["step"] == {"type": "number", "multipleOf": 0.25, "exclusiveMinimum": 0,
                         "maximum": NUMBER_LIMIT}
    assert p["either"] == {"type": ["number", "null"]}  # may be null: left alone
    assert p["pattern"]["pattern"] == "^[0-9]+$"
    assert list(out["patternProperties"]) == ["^[0-9A-Za-z_]+$"]
    assert out["enum_data"] == {"enum": [{"pattern": r"\d"}]}  # data, not a schema
    assert schema["properties"]["n"] == {"type": "number"}  # the caller's copy is untouched


@pytest.mark.parametrize("schema", [
    {"$ref": "#"},
    {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"type": "array", "minItems": 1, "items": {"$ref": "#"}},
    {"anyOf": [{"$ref": "#/definitions/x"}], "definitions": {"x": {
        "type": "object", "required": ["y"], "properties": {"y": {"$ref": "#"}}}}},
])
def test_schemas_with_only_infinite_instances_are_found(schema):
    assert infinite_only(schema)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"$ref": "#"}}},  # "a" may be left out
    {"type": ["object", "null"], "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    {"$defs": {"node": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["kids"]}},
     "$ref": "#/$defs/node"},  # a tree: "kids": [] ends it
    {"$ref": "other.json#/x"},  # not resolvable here: not refused
    any_json_object(),
])
def test_schemas_with_finite_instances_are_not(schema):
    assert not infinite_only(schema)


def test_json_blocks_of_a_lark_grammar():
    g = 'start: "x" %json {"$ref": "#"} | b\nb: %json{"type": "string"}'
    assert json_blocks(g) == [{"$ref": "#"}, {"type": "string"}]


@pytest.mark.parametrize("value", [
    "[" * 100_000,  # RecursionError in the JSON parser
    '{"a":' * 3000 + "1" + "}" * 3000,
    {"items": json.loads("[" * 200 + "]" * 200)},  # a value past the depth limit
])
def test_deep_schemas_are_refused_naming_the_field(value):
    with pytest.raises(StructuredOutputError) as info:
        SamplingParams(structured_outputs={"json": value})
    assert info.value.field == "structured_outputs.json" and "deep" in info.value.detail


def test_key_tells_compact_from_free_whitespace_and_values_shown_are_short():
    free = StructuredOutputsParams(json={"type": "object"})
    compact = StructuredOutputsParams(json={"type": "object"}, disable_any_whitespace=True)
    assert free.key() != compact.key()
    for bad in ({"choice": ["a", ["x" * 900_000]]}, {"json_object": "y" * 900_000},
                {"regex": "a", "disable_any_whitespace": "z" * 900_000}):
        with pytest.raises(StructuredOutputError) as info:
            SamplingParams(structured_outputs=bad)
        assert len(str(info.value)) < 200
