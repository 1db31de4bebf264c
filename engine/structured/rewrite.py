"""Structures rewritten before llguidance sees them: ASCII meanings of ``\\d``, ``\\w`` and
``\\s``, numbers with a bounded count of digits, and a bound on how deep a schema nests.

- **ASCII classes.** In Rust's ``regex`` syntax (llguidance's) ``\\d`` is any Unicode digit:
  ``\\d{3}`` lets a model write ``🯸🯸🯸`` (U+1FBF8, a "segmented digit"). Users mean
  ``[0-9]``, as in JSON Schema patterns, JavaScript and vLLM's regexes; so every ``\\d``,
  ``\\w``, ``\\s`` and their negations become ASCII classes (:func:`ascii_classes`).
- **Bounded numbers.** A JSON number with no bounds lets a small model write digits for ever
  (``10000000000...``, ``75.8324132880012878...``). A ``number`` or ``integer`` schema gets
  the bounds it lacks: ``|x| <=`` :data:`INTEGER_LIMIT` for integers (about 18 digits),
  :data:`NUMBER_LIMIT` and at most :data:`FRACTION_DIGITS` decimals for numbers (15 + 6
  digits, no exponent), unless the schema sets its own ``minimum``/``maximum`` or
  ``multipleOf`` (:func:`bounded_schema`).
- **Depth.** :func:`check_depth` refuses a value nested deeper than :data:`MAX_DEPTH` levels,
  without recursion (a schema 7,000 arrays deep would raise ``RecursionError`` elsewhere).
"""

from __future__ import annotations

from engine.structured.params import StructuredOutputError

ASCII = {"d": "[0-9]", "D": "[^0-9]", "w": "[0-9A-Za-z_]", "W": "[^0-9A-Za-z_]",
         "s": "[\\t\\n\\x0B\\x0C\\r ]", "S": "[^\\t\\n\\x0B\\x0C\\r ]"}
"""Each shorthand class and its ASCII class. A class may nest inside another in Rust's
syntax (``[[0-9]-]``), so the same text serves inside and outside brackets."""
INTEGER_LIMIT = 10**18 - 1
"""Largest magnitude of an ``integer`` without bounds of its own (fits int64; llguidance reads
bounds as float64, where it rounds to 10**18: at most 19 digits)."""
NUMBER_LIMIT = 10**15
"""Largest magnitude of a ``number`` without bounds of its own (exact in a float64)."""
FRACTION_DIGITS = 6
"""Most decimals of a ``number`` without a ``multipleOf`` of its own."""
MAX_DEPTH = 128
"""Deepest nesting of a schema (objects and lists, counted together) accepted."""
DATA_KEYS = frozenset({"enum", "const", "default", "examples", "example"})
"""Keywords whose values are data, not schemas: never rewritten."""


def ascii_classes(regex: str) -> str:
    """``regex`` with ``\\d \\D \\w \\W \\s \\S`` replaced by ASCII classes (:data:`ASCII`).

    An escaped backslash (``\\\\d``) stays a backslash then ``d``; inside brackets the class
    nests (``[\\d-]`` -> ``[[0-9]-]``, ``[^\\s\\S]`` -> ``[^[...][^...]]``, both Rust syntax).
    """
    if "\\" not in regex:
        return regex
    out, i, n = [], 0, len(regex)
    while i < n:
        c = regex[i]
        if c == "\\" and i + 1 < n:
            nxt = regex[i + 1]
            out.append(ASCII.get(nxt, c + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_depth(value, field: str, limit: int = MAX_DEPTH) -> None:
    """Refuse ``value`` (dicts and lists) nested deeper than ``limit``; iterative.

    Raises:
        StructuredOutputError: naming ``field`` and the limit.
    """
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth > limit:
            raise StructuredOutputError(field, f"nested more than {limit} levels deep")
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def bounded_schema(schema: dict) -> dict:
    """A copy of ``schema`` with ASCII pattern classes and bounded numbers (see the module).

    Call :func:`check_depth` first: the walk recurses once per level.
    """
    return _walk(schema)


def _walk(node):
    if isinstance(node, list):
        return [_walk(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in DATA_KEYS:
            out[key] = value
        elif key == "pattern" and isinstance(value, str):
            out[key] = ascii_classes(value)
        elif key == "patternProperties" and isinstance(value, dict):
            out[key] = {ascii_classes(k): _walk(v) for k, v in value.items()}
        elif key == "properties" and isinstance(value, dict):
            out[key] = {k: _walk(v) for k, v in value.items()}  # names are data
        else:
            out[key] = _walk(value)
    _bound_numbers(out)
    return out


def _bound_numbers(node: dict) -> None:
    """Give a ``number`` / ``integer`` node (``type`` naming only numeric types) the bounds
    it lacks, in place."""
    types = node.get("type")
    types = [types] if isinstance(types, str) else types
    if not isinstance(types, list) or not types or any(t not in ("number", "integer")
                                                        for t in types):
        return
    limit = INTEGER_LIMIT if types == ["integer"] else NUMBER_LIMIT
    if "minimum" not in node and "exclusiveMinimum" not in node:
        node["minimum"] = -limit
    if "maximum" not in node and "exclusiveMaximum" not in node:
        node["maximum"] = limit
    if "number" in types and "multipleOf" not in node:
        node["multipleOf"] = 10.0 ** -FRACTION_DIGITS


def any_json_object() -> dict:
    """The schema of ``json_object`` (any JSON object) with bounded numbers: every value is
    null, a boolean, a string, a bounded number, or an array or object of such values."""
    value = {"anyOf": [{"type": ["null", "boolean", "string"]},
                       bounded_schema({"type": "number"}),
                       {"type": "array", "items": {"$ref": "#/$defs/value"}},
                       {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}}]}
    return {"$defs": {"value": value}, "type": "object",
            "additionalProperties": {"$ref": "#/$defs/value"}}
