"""Structured output in the API: OpenAI's ``response_format``, vLLM's ``structured_outputs``
and its older ``guided_json`` / ``guided_regex`` / ``guided_choice`` / ``guided_grammar``,
all turned into the engine's ``SamplingParams.structured_outputs``.

A structure the engine refuses is a 400 whose ``param`` is the field the client wrote
(``response_format.json_schema.schema``, ``guided_regex``, ``structured_outputs.choice[1]``).
"""

from __future__ import annotations

import asyncio
import re

from engine.serve.errors import APIError
from engine.structured.params import KINDS, OPTIONS, StructuredOutputError

GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice",
          "guided_grammar": "grammar"}
"""vLLM's older request fields and the structure each one sets."""
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""OpenAI's rule for ``response_format.json_schema.name``."""


def _bad(message: str, param: str) -> APIError:
    return APIError(400, f"{param}: {message}" if not message.startswith(param) else message,
                    param, "invalid_value")


def structure_of(body) -> tuple[dict | None, dict[str, str]]:
    """The structure a request asks for, and where each of its parts came from.
    ``structured_outputs`` may carry only options (``disable_any_whitespace``) beside a
    structure asked for elsewhere (``response_format``, ``guided_json``).

    Args:
        body: a chat or text completion request with the fields of this module.

    Returns:
        ``(structure, fields)``: ``structure`` is a dict for
        :class:`engine.structured.params.StructuredOutputsParams` or ``None`` (free text,
        ``response_format`` ``text``); ``fields`` maps the engine's field paths
        (``structured_outputs.json``) onto the request's.

    Raises:
        APIError: 400 for a malformed ``response_format``, or structures asked for in two
            places; ``param`` names the field.
    """
    found: list[tuple[str, dict, dict]] = []
    rf = getattr(body, "response_format", None)
    if rf is not None:
        structure = _response_format(rf)
        if structure is not None:
            kind = next(iter(structure))
            path = "response_format.json_schema.schema" if kind == "json" else "response_format"
            found.append(("response_format", structure,
                          {f"structured_outputs.{kind}": path, "structured_outputs": path}))
    so = getattr(body, "structured_outputs", None)
    options: dict = {}
    if so is not None:
        if not isinstance(so, dict):
            raise _bad("must be an object with one of " + ", ".join(KINDS), "structured_outputs")
        given = {k: v for k, v in so.items() if k in KINDS and v is not None}
        options = {k: so[k] for k in OPTIONS if k in so}
        if given or not options:
            found.append(("structured_outputs", {**given, **options}, {}))
    for name, kind in GUIDED.items():
        value = getattr(body, name, None)
        if value is not None:
            found.append((name, {kind: value},
                          {f"structured_outputs.{kind}": name, "structured_outputs": name}))
    if not found:
        return None, {}
    if len(found) > 1:
        raise _bad(f"ask for one structure: {found[0][0]} and {found[1][0]} are both set",
                   found[1][0])
    structure, fields = found[0][1], found[0][2]
    if options and found[0][0] != "structured_outputs":  # e.g. response_format + options
        structure = {**structure, **options}
        fields = {**fields, **{f"structured_outputs.{k}": f"structured_outputs.{k}"
                               for k in options}}
    return structure, fields


def _response_format(rf) -> dict | None:
    """OpenAI's ``response_format`` as a structure (``None`` for ``text``)."""
    if not isinstance(rf, dict):
        raise _bad("must be an object with a type", "response_format")
    kind = rf.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json_object": True}
    if kind != "json_schema":
        raise _bad(f"must be text, json_object or json_schema, got {str(kind)[:40]!r}",
                   "response_format.type")
    js = rf.get("json_schema")
    if not isinstance(js, dict):
        raise _bad("is required with type json_schema (an object with name and schema)",
                   "response_format.json_schema")
    name = js.get("name")
    if name is not None and (not isinstance(name, str) or not NAME.match(name)):
        raise _bad("must be 1-64 letters, digits, _ or -", "response_format.json_schema.name")
    if "strict" in js and js["strict"] is not None and not isinstance(js["strict"], bool):
        raise _bad("must be true or false", "response_format.json_schema.strict")
    schema = js.get("schema")
    if schema is None:
        raise _bad("is required", "response_format.json_schema.schema")
    return {"json": schema}


def api_error(exc: StructuredOutputError, fields: dict[str, str]) -> APIError:
    """The 400 for a structure the engine refused, naming the request's own field."""
    field = exc.field
    for engine_path, api_path in sorted(fields.items(), key=lambda kv: -len(kv[0])):
        if field == engine_path or field.startswith(engine_path + "["):
            field = api_path + field[len(engine_path):]
            break
    return APIError(400, f"{field}: {exc.detail}", field, "invalid_value")


async def compile_off_loop(engine, params, fields: dict[str, str]) -> None:
    """Compile the request's grammar in a worker thread (llguidance releases the GIL), so
    a large schema stalls neither the event loop nor the engine; ``submit`` then finds it in
    the cache.

    Raises:
        APIError: 400 when it does not compile, naming the request's field.
    """
    so = params.structured_outputs
    if so is None:
        return
    try:
        await asyncio.to_thread(engine.structured.compiler.prepare, so)
    except StructuredOutputError as exc:
        raise api_error(exc, fields) from None
