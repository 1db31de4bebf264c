"""Number formatting shared by the page's cards, tables and figures (pure functions)."""

from __future__ import annotations

import math

_UNITS = (("GB", 1e9), ("MB", 1e6), ("KB", 1e3))


def fmt_bytes(n: float | int | None) -> str:
    """Bytes as a short decimal string: ``46080 -> "46.1 KB"``; ``None`` -> ``"N/A"``.

    Decimal units (1 KB = 1000 bytes) so the numbers match a hand calculation.
    """
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return "N/A"
    for unit, size in _UNITS:
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n):,} B"


def fmt_int(n: int | float | None) -> str:
    """An integer with thousands separators (``46080 -> "46,080"``); ``None`` -> ``"N/A"``."""
    if n is None:
        return "N/A"
    return f"{int(round(n)):,}"


def fmt_seconds(s: float | None) -> str:
    """A duration in seconds as ms below one second, else seconds: ``0.0123 -> "12.3 ms"``."""
    if s is None or not math.isfinite(s):
        return "–"
    if s < 1.0:
        return f"{s * 1000:.1f} ms"
    return f"{s:.2f} s"


def fmt_rate(r: float | None, unit: str = "tok/s") -> str:
    """A rate such as tokens per second; 0 or ``None`` (undefined) -> ``"–"``."""
    if not r or not math.isfinite(r):
        return "–"
    return f"{r:,.1f} {unit}" if r < 100 else f"{r:,.0f} {unit}"


def fmt_params(n: int | None) -> str:
    """A parameter count: ``134515008 -> "134.5M"``."""
    if not n:
        return "N/A"
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    return f"{n / 1e6:.1f}M"
