"""What structure a request's output must have (vLLM's ``StructuredOutputsParams``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

KINDS = ("json", "json_object", "regex", "choice", "grammar")
"""The structures a request can ask for, in vLLM's names."""
MAX_SPEC_CHARS = 200_000
"""Longest schema, regex or grammar text accepted (characters): a bound on compile work."""
MAX_CHOICES = 1024
"""Most strings a ``choice`` list may hold."""
OPTIONS = ("explain", "disable_any_whitespace")
"""Fields of :class:`StructuredOutputsParams` that are options, not structures."""
SHOWN_CHARS = 80
"""Longest refused value an error message repeats (characters)."""


def shown(value) -> str:
    """``repr(value)`` cut to :data:`SHOWN_CHARS` characters, for error messages."""
    text = repr(value) if not isinstance(value, (list, dict)) or len(value) < 100 else \
        f"a {type(value).__name__} of {len(value)} items"
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


class StructuredOutputError(ValueError):
    """A structure that cannot be served; ``field`` names the part at fault.

    Attributes:
        field: the field's path, e.g. ``"structured_outputs.json"``; the API maps it onto the
            request field it came from (``response_format.json_schema.schema``).
        detail: the reason alone, without the field.
    """

    def __init__(self, field: str, detail: str):
        super().__init__(f"{field}: {detail}")
        self.field, self.detail = field, detail


@dataclass
class StructuredOutputsParams:
    """One structure the output must follow; exactly one field is set.

    Attributes:
        json: a JSON schema (a dict, or its text); the output is one JSON value valid under it.
        json_object: ``True`` for any JSON object (OpenAI's ``{"type": "json_object"}``).
        regex: a regular expression (Rust ``regex`` syntax) the whole output must match.
        choice: a non-empty list of strings; the output is exactly one of them.
        grammar: a context-free grammar, GBNF (llama.cpp's ``root ::= ...``) or Lark
            (``start: ...``), as llguidance reads them.
        explain: this engine's extra, not a structure: at each step also record the share of
            the probability (before the mask, at temperature 1) the mask removed and the most
            likely removed tokens, for the page's chips (a softmax per row per step).
        disable_any_whitespace: vLLM's option, not a structure: JSON (``json``,
            ``json_object``) comes out compact (``{"a":1}``). By default the model may write
            JSON whitespace as it likes, at most 24 characters between two tokens (see
            :data:`engine.structured.compiler.WHITESPACE`).

    Raises:
        StructuredOutputError: (a ``ValueError``) from ``__post_init__``: none or several set,
            a wrong type, an empty or oversized choice list or text; the message names the
            field (``structured_outputs.choice``). Whether a schema, regex or grammar
            compiles is checked when the request is submitted.
    """

    json: dict | str | None = None
    json_object: bool | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    explain: bool = False
    disable_any_whitespace: bool = False

    def __post_init__(self) -> None:
        for flag in OPTIONS:
            if not isinstance(getattr(self, flag), bool):
                raise StructuredOutputError(f"structured_outputs.{flag}", "must be true or "
                                            f"false, got {shown(getattr(self, flag))}")
        given = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise StructuredOutputError(
                "structured_outputs", f"set exactly one of {', '.join(KINDS)}, got "
                f"{', '.join(given) if given else 'none'}")
        kind = given[0]
        f = f"structured_outputs.{kind}"
        if kind == "json":
            if isinstance(self.json, str):
                if len(self.json) > MAX_SPEC_CHARS:
                    raise StructuredOutputError(f, f"schema longer than {MAX_SPEC_CHARS} characters")
                try:
                    self.json = json.loads(self.json)
                except RecursionError:
                    raise StructuredOutputError(f, "nested too deeply") from None
                except ValueError as exc:
                    raise StructuredOutputError(f, f"not valid JSON text ({exc})") from None
            if isinstance(self.json, bool):  # JSON Schema's true / false schemas
                self.json = {} if self.json else {"not": {}}
            if not isinstance(self.json, dict):
                raise StructuredOutputError(f, "a JSON schema must be an object, got "
                                            f"{type(self.json).__name__}")
            from engine.structured.rewrite import check_depth

            check_depth(self.json, f)
            if len(json.dumps(self.json)) > MAX_SPEC_CHARS:
                raise StructuredOutputError(f, f"schema longer than {MAX_SPEC_CHARS} characters")
        elif kind == "json_object":
            if self.json_object is not True:
                raise StructuredOutputError(f, f"must be true, got {shown(self.json_object)}")
        elif kind == "choice":
            if not isinstance(self.choice, (list, tuple)):
                raise StructuredOutputError(f, "must be a list of strings, got "
                                            f"{type(self.choice).__name__}")
            if not self.choice:
                raise StructuredOutputError(f, "the list of choices is empty")
            if len(self.choice) > MAX_CHOICES:
                raise StructuredOutputError(f, f"at most {MAX_CHOICES} choices, got {len(self.choice)}")
            for i, c in enumerate(self.choice):
                if not isinstance(c, str) or not c:
                    raise StructuredOutputError(f"{f}[{i}]", "must be a non-empty string, got "
                                                f"{shown(c)}")
            self.choice = list(self.choice)
        else:  # regex, grammar
            text = getattr(self, kind)
            if not isinstance(text, str):
                raise StructuredOutputError(f, f"must be a string, got {type(text).__name__}")
            if not text.strip():
                raise StructuredOutputError(f, "is empty")
            if len(text) > MAX_SPEC_CHARS:
                raise StructuredOutputError(f, f"longer than {MAX_SPEC_CHARS} characters")

    @property
    def kind(self) -> str:
        """Which structure: one of :data:`KINDS`."""
        return next(k for k in KINDS if getattr(self, k) not in (None, False))

    @property
    def field(self) -> str:
        """The field path of the structure, ``structured_outputs.<kind>``."""
        return f"structured_outputs.{self.kind}"

    def key(self) -> tuple[str, str, bool]:
        """``(kind, canonical text, disable_any_whitespace)``: the grammar cache's key (a
        schema's keys sorted, so the same schema written in another key order hits the
        cache)."""
        value = getattr(self, self.kind)
        if isinstance(value, (dict, list)):
            text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        else:
            text = str(value)
        return self.kind, text, self.disable_any_whitespace

    @classmethod
    def coerce(cls, value) -> "StructuredOutputsParams | None":
        """``value`` as a :class:`StructuredOutputsParams`: one already, a dict of its fields,
        or ``None``.

        Raises:
            StructuredOutputError: anything else, or a dict with unknown fields.
        """
        if value is None or isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise StructuredOutputError("structured_outputs", "must be an object with one of "
                                        f"{', '.join(KINDS)}, got {type(value).__name__}")
        unknown = sorted(set(value) - set(KINDS) - set(OPTIONS))
        if unknown:
            raise StructuredOutputError("structured_outputs", f"unknown field {unknown[0]!r} "
                                        f"(known: {', '.join(KINDS)})")
        return cls(**value)
