"""Checks of the values a client sends, before anything reaches the engine.

Web clients send JSON of their own making through the API and the queue, so every field is
checked for its type here, and every refusal is a ``ValueError`` whose message names the field
(and never echoes a huge or unprintable value back).
"""

from __future__ import annotations

LIMIT = 2**63  # integers beyond ±2**63 are refused (no seed or count needs more)


def shown(value) -> str:
    """A refused value for a message: its ``repr`` cut to 40 characters, a huge integer as its
    digit count."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"a {len(str(abs(value)))}-digit integer"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def text(name: str, value, *, default: str | None = None) -> str:
    """``value`` as a string of valid Unicode (``None`` gives ``default`` when one is set).

    Raises:
        ValueError: not a string, or a lone surrogate in it (``"\\ud800"`` in JSON), which no
            tokenizer can encode.
    """
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} contains a lone surrogate (U+{ord(value[exc.start]):04X}) at "
                         f"character {exc.start}: send valid Unicode text") from None
    return value


def number(name: str, value) -> float:
    """``value`` (an int or a float, not a bool) as a float.

    Raises:
        ValueError: not a number, or an integer too large for a float.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {shown(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} must be a number of a sensible size, got {shown(value)}") from None


def whole(name: str, value) -> int:
    """``value`` (an int, or a float with no fraction as JSON may send it) as an int in
    ``[-2**63, 2**63)``.

    Raises:
        ValueError: not an integer, or out of that range.
    """
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {shown(value)}")
    if not -LIMIT <= value < LIMIT:
        raise ValueError(f"{name} must be an integer in [-2**63, 2**63), got {shown(value)}")
    return value


def flag(name: str, value) -> bool:
    """``True``/``False``, or the strings ``"true"``/``"false"`` (any case) as JSON clients
    and forms send them.

    Raises:
        ValueError: anything else (``"no"``, ``0``, ``None``...): a typo must not flip a setting.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{name} must be true or false, got {shown(value)}")
