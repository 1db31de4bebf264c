"""Static files of the page: example prompts and the stylesheet, read from ``assets/``."""

from __future__ import annotations

import json
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[2] / "assets"
MODES = ("chat", "raw")


def load_examples(path: Path | None = None) -> list[dict]:
    """The example prompts: a list of ``{"label", "mode", "prompt"}`` dicts (``mode`` is chat or raw).

    Raises:
        ValueError: an entry lacks a field or has an unknown mode.
    """
    data = json.loads((path or ASSETS / "examples.json").read_text(encoding="utf-8"))
    out = []
    for i, ex in enumerate(data["examples"]):
        if not all(isinstance(ex.get(k), str) and ex[k] for k in ("label", "mode", "prompt")):
            raise ValueError(f"example {i} needs non-empty label, mode and prompt")
        if ex["mode"] not in MODES:
            raise ValueError(f"example {i}: mode must be one of {MODES}, got {ex['mode']!r}")
        out.append({"label": ex["label"], "mode": ex["mode"], "prompt": ex["prompt"]})
    return out


def read_css(path: Path | None = None) -> str:
    """The page's stylesheet (``assets/style.css``); empty when the file is missing."""
    p = path or ASSETS / "style.css"
    return p.read_text(encoding="utf-8") if p.exists() else ""
