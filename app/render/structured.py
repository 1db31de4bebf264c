"""The page's structured output: the structure the sidebar's "Structured output" block
describes, and what each token chip says about the mask (the block itself:
:func:`app.tabs.playground.layout.structure_controls`).

The sidebar offers none, a JSON schema (a code box with examples: a person, a list of cities,
an enum), a regex, or a list of choices; :func:`structure_from` turns them into the engine's
``structured_outputs`` (with ``explain`` on, so each chip can show what the mask removed).
No Gradio, no torch: the examples are plain dicts from :mod:`engine.structured.examples`.
"""

from __future__ import annotations

import json

from engine.structured.examples import CITIES, MOOD, PERSON

from app.server import fields
from app.render.fmt import fmt_int

KINDS = [("None", "none"), ("JSON schema", "json"), ("Regex", "regex"), ("Choice", "choice")]
EXAMPLES = {"A person": PERSON, "A list of cities": CITIES, "A mood (enum)": MOOD}
"""The JSON schema examples of the sidebar's drop-down."""
BOX_LABELS = {"json": "JSON schema", "regex": "Regex", "choice": "Choices"}
"""The text box's short label per kind (its icons leave room for about 20 characters)."""
# the kind's hint, shown under the radio once it is chosen
HINTS = {"none": "the engine masks every token that would break it",
         "json": "A JSON schema: the answer is one JSON value valid under it.",
         "regex": "A regular expression the whole answer must match, e.g. \\d{3}-\\d{4}",
         "choice": "One choice per line: the answer is exactly one of them."}
MAX_TEXT = 20_000
STARTS = {"regex": r"\d{3}-\d{4}", "choice": "yes\nno\nnot sure"}
"""What the box holds when regex or choice is chosen (JSON starts from its first example)."""


def start_text(kind: str) -> str:
    """The box's text when ``kind`` is chosen: the first JSON schema example, a regex, choices;
    ``""`` for none."""
    return example_text(next(iter(EXAMPLES))) if kind == "json" else STARTS.get(kind, "")


def example_text(name: str) -> str:
    """The schema of example ``name`` as indented JSON text (``""`` for an unknown name)."""
    schema = EXAMPLES.get(name)
    return json.dumps(schema, indent=2) if schema is not None else ""


def structure_from(kind: str, text: str) -> dict | None:
    """The engine's ``structured_outputs`` for the sidebar's choice, ``None`` for none.

    Args:
        kind: ``"none"``, ``"json"``, ``"regex"`` or ``"choice"``.
        text: the schema (JSON text), the regex, or the choices one per line.

    Raises:
        ValueError: an unknown kind, empty text, a schema that is not JSON; the message names
            the field as the page shows it ("structured output: ...").
    """
    kind = fields.text("structured output kind", kind, default="none")
    if kind == "none":
        return None
    text = fields.text("structured output", text, default="")
    if len(text) > MAX_TEXT:
        raise ValueError(f"structured output is longer than {MAX_TEXT:,} characters")
    if kind not in HINTS:
        raise ValueError(f"structured output kind must be none, json, regex or choice, got "
                         f"{fields.shown(kind)}")
    if not text.strip():
        raise ValueError(f"structured output: the {dict((v, k) for k, v in KINDS)[kind]} box is empty")
    if kind == "json":
        try:
            schema = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"structured output: the JSON schema is not valid JSON ({exc})") from None
        return {"json": schema, "explain": True}
    if kind == "regex":
        return {"regex": text, "explain": True}
    choices = [line.strip() for line in text.splitlines() if line.strip()]
    return {"choice": choices, "explain": True}


def remote_fields(structure) -> dict:
    """The request fields of a structure for a remote OpenAI-compatible server: a JSON schema
    or any JSON object as OpenAI's ``response_format`` (OpenAI, vLLM, llama.cpp's server), a
    regex, choice or grammar as vLLM's ``structured_outputs``; ``{}`` without one.

    Args:
        structure: ``SamplingParams.structured_outputs`` (``None`` or its params object).
    """
    if structure is None:
        return {}
    kind = structure.kind
    if kind == "json":
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": "structure", "schema": structure.json}}}
    if kind == "json_object":
        return {"response_format": {"type": "json_object"}}
    return {"structured_outputs": {kind: getattr(structure, kind)}}


def mask_of(ev) -> dict | None:
    """A token's mask as its chip shows it, from a step event (``None`` without a
    structure): ``{"allowed", "vocab", "forced", "jumped", "mass", "removed": [[text, p]]}``."""
    detail = getattr(ev, "mask_detail", None)
    if not detail:
        return None
    return {"allowed": getattr(ev, "allowed_tokens", None), "vocab": detail.get("vocab_size"),
            "forced": bool(getattr(ev, "forced", False)), "jumped": bool(getattr(ev, "jumped", False)),
            "mass": detail.get("removed_mass"),
            "removed": [[str(t), round(float(p), 6)] for t, p in detail.get("removed_top", [])]}


def mask_label(mask: dict) -> str:
    """One line for a chip's tooltip: "7 of 49,152 allowed", "forced (the only allowed token)",
    or "forced: appended without a forward pass"."""
    if mask.get("jumped"):
        return "forced: appended without a forward pass (jump-forward)"
    allowed, vocab = mask.get("allowed"), mask.get("vocab")
    line = f"{fmt_int(allowed)} of {fmt_int(vocab)} allowed" if allowed is not None else ""
    if mask.get("forced"):
        line += " (forced: the only allowed token)"
    if mask.get("mass") is not None:
        line += f"; the mask removed {100 * mask['mass']:.1f}% of the probability"
    return line


def chip_extras(tok) -> tuple[str, dict]:
    """``(extra CSS class, extra data attributes)`` of a token chip with a mask."""
    mask = getattr(tok, "mask", None)
    if not mask:
        return "", {}
    data = {"mask": mask_label(mask),
            "removed": json.dumps(mask.get("removed", [])[:5], ensure_ascii=False)}
    return (" tok-forced" if mask.get("forced") else ""), data
