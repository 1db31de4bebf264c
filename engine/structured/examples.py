"""Example structures shared by the bench, the page and the docs: small, large and
schema-heavy JSON schemas, each with a valid instance for replaying its masks."""

from __future__ import annotations

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 20},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
"""A person: a short name and an age (the small schema)."""

CITIES = {"type": "array", "minItems": 1, "maxItems": 5,
          "items": {"type": "object", "additionalProperties": False,
                    "required": ["city", "country"],
                    "properties": {"city": {"type": "string", "maxLength": 24},
                                   "country": {"type": "string", "maxLength": 24}}}}
"""A list of cities with their countries."""

MOOD = {"type": "object", "additionalProperties": False, "required": ["mood"],
        "properties": {"mood": {"enum": ["happy", "sad", "angry", "calm"]}}}
"""An enum: one of four moods."""

FIVE_STRINGS = {"type": "object", "additionalProperties": False,
                "required": ["title", "author", "genre", "city", "language"],
                "properties": {k: {"type": "string", "maxLength": 12}
                               for k in ("title", "author", "genre", "city", "language")}}
"""An object of five string fields (the forced-token measurement's schema)."""


def large_schema() -> dict:
    """A 32-property order record: strings with lengths and patterns, bounded integers and
    numbers, enums, booleans, arrays and nested objects (the large schema)."""
    props: dict = {}
    for i in range(8):
        props[f"note_{i}"] = {"type": "string", "maxLength": 16}
        props[f"count_{i}"] = {"type": "integer", "minimum": 0, "maximum": 9999}
        props[f"flag_{i}"] = {"type": "boolean"}
        props[f"status_{i}"] = {"enum": ["new", "paid", "shipped", "returned", "lost"]}
    props["customer"] = {"type": "object", "additionalProperties": False,
                         "required": ["name", "email", "zip"],
                         "properties": {"name": {"type": "string", "maxLength": 24},
                                        "email": {"type": "string",
                                                  "pattern": "^[a-z]{1,12}@[a-z]{1,12}\\.com$"},
                                        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}
    props["items"] = {"type": "array", "maxItems": 4,
                      "items": {"type": "object", "additionalProperties": False,
                                "required": ["sku", "price"],
                                "properties": {"sku": {"type": "string", "maxLength": 10},
                                               "price": {"type": "number", "minimum": 0}}}}
    return {"type": "object", "additionalProperties": False, "required": sorted(props),
            "properties": props}


def large_instance() -> dict:
    """A valid instance of :func:`large_schema`, its keys in the schema's property order (the
    order the grammar emits them in)."""
    out: dict = {}
    for key in large_schema()["properties"]:
        kind, _, i = key.rpartition("_")
        if key == "customer":
            out[key] = {"name": "Ada Lovelace", "email": "ada@mail.com", "zip": "02139"}
        elif key == "items":
            out[key] = [{"sku": "A-100", "price": 12.5}, {"sku": "B-7", "price": 3}]
        elif kind == "note":
            out[key] = f"line {i} ok"
        elif kind == "count":
            out[key] = 40 + int(i)
        elif kind == "flag":
            out[key] = int(i) % 2 == 0
        else:
            out[key] = ["new", "paid", "shipped", "returned", "lost"][int(i) % 5]
    return out


SMALL_INSTANCE = {"name": "Ada", "age": 36}
"""A valid instance of :data:`PERSON`."""
