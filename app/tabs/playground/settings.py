"""The sidebar's request settings as one value: what Generate takes from the sidebar.

The sidebar's controls (mode, max new tokens, seed, the KV cache switch, the sampling sliders,
the system prompt and the structured output block) are not Generate's inputs one by one. A
browser-only event (:data:`JOIN_JS`, no server step) writes them, whenever one changes, as one
JSON object into a hidden textbox, and Generate takes that textbox. Gradio 6.31's front end
refreshes the loading status of every input of an event that has completed, on every later
message of every event, a walk of the page's tree and a snapshot of the component's props each
time (docs/performance.md, "A light page"): one input instead of twelve.

:func:`parse` turns the value back into the sidebar's fields, refusing what is not one of them by
name. The values themselves are checked where they are used (``handlers.generate``).
"""

from __future__ import annotations

import json

from app.server.fields import shown

NAMES = ("mode", "system_prompt", "temperature", "top_p", "top_k", "min_p", "rep_penalty",
         "max_tokens", "seed", "use_kv", "structure_kind", "structure_text")
"""The sidebar components the value holds, by their names in the page namespace."""

JOIN_JS = ("(...values) => JSON.stringify(Object.fromEntries("
           + json.dumps(list(NAMES)) + ".map((name, i) => [name, values[i]])))")
"""The browser-only listener's ``js``: the controls' values (in :data:`NAMES`' order) as one
JSON object."""

LIMIT = 200_000
"""Characters the value may have (a JSON schema of the structured output block included)."""


def initial(components: dict) -> str:
    """The value for the controls' start values (``components``: name -> Gradio component)."""
    return json.dumps({name: components[name].value for name in NAMES})


def parse(value, defaults: dict) -> dict:
    """The settings in ``value`` (JSON text of an object whose keys are among :data:`NAMES`),
    with ``defaults`` for the keys it lacks.

    Raises:
        ValueError: not a JSON object, longer than :data:`LIMIT`, or a key that is not a
            setting (named in the message).
    """
    if not isinstance(value, str) or len(value) > LIMIT:
        raise ValueError(f"settings must be a JSON object of at most {LIMIT} characters")
    try:
        got = json.loads(value)
    except json.JSONDecodeError:
        raise ValueError("settings must be a JSON object") from None
    if not isinstance(got, dict):
        raise ValueError("settings must be a JSON object")
    _check_names(got)
    return {**defaults, **got}


def replaced(value: str, **fields) -> str:
    """The settings value ``value`` with ``fields`` (names of :data:`NAMES`) set: how a client
    of the page's queue API (``scripts/bench_class.py``, tests) fills Generate's settings input
    from the page's start value.

    Raises:
        ValueError: a name that is not a setting.
    """
    _check_names(fields)
    return json.dumps({**json.loads(value), **fields})


def _check_names(names) -> None:
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        raise ValueError(f"settings has no field {shown(unknown[0])} (fields: {', '.join(NAMES)})")
