"""Where a model name loads from: an embedded model, a local folder, the local Hub cache or
the Hub, decided without loading weights (so a bad name fails at once)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from engine.errors import ModelLoadError
from engine.model.embedded import EMBEDDED, _cached, _embedded_folder, _say


def _locate(name: str, progress) -> tuple[str, str, dict]:
    """Map a model name to (path or hub id, source description, extra from_pretrained kwargs)."""
    key = name.lower()
    if key in EMBEDDED:
        emb = EMBEDDED[key]
        if importlib.util.find_spec(emb.package) is None and not _cached(emb) \
                and os.environ.get("HF_HUB_OFFLINE") != "1":
            # e.g. a Hugging Face Space, where requirements can't be installed with --no-deps
            _say(progress, f"{emb.package} not installed: loading {emb.hub_id} from the Hub")
            return emb.hub_id, f"Hugging Face Hub: {emb.hub_id} (embedded package missing)", {}
        folder, source = _embedded_folder(emb, progress)
        return str(folder), source, {}
    for emb in EMBEDDED.values():  # the hub id of an embedded model also loads offline
        if key == emb.hub_id.lower() and os.environ.get("HF_HUB_OFFLINE") == "1":
            folder, source = _embedded_folder(emb, progress)
            return str(folder), source, {}
    kind, where = _outside(name)
    if kind == "folder":
        return where, f"local folder {where}", {}
    if kind == "cache":
        return where, f"Hugging Face Hub cache: {where}", {}
    return where, f"Hugging Face Hub: {where}", {}


def _outside(name: str, label: str = "model") -> tuple[str, str]:
    """Where a model that is not embedded would load from, without loading anything:
    ``("folder", path)``, ``("cache", hub id)`` (in the local Hub cache) or ``("hub", hub id)``
    (the Hub answers a TCP connection).

    Raises:
        ModelLoadError: a folder without ``config.json``, a name of no such form, or a Hub id
            neither cached nor reachable; the message starts with ``label`` and the name.
    """
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise ModelLoadError(f"{label} {name!r}: folder has no config.json")
        return "folder", str(path)
    if name.count("/") != 1 or name.startswith(("/", ".")):
        raise ModelLoadError(
            f"{label} {name!r}: not an embedded name ({', '.join(EMBEDDED)}), not a local folder, "
            "and not a Hub id of the form org/name")
    from engine.model.hub import cached_on_disk, hub_reachable

    if cached_on_disk(name):
        return "cache", name
    ok, why = hub_reachable()
    if not ok:
        raise ModelLoadError(f"{label} {name!r} is not in the local Hub cache and {why}")
    return "hub", name


def check_model_name(name: str, label: str = "model") -> None:
    """Refuse, before anything loads, a model name that cannot load: the lookup of
    :func:`load_model` (an embedded name or its Hub id, a local folder with ``config.json``, a
    Hub id in the local cache or with the Hub reachable) without reading any weights, so a bad
    ``--draft-model`` fails at once instead of after the target model has loaded. A Hub id
    that the Hub does not have still fails when it loads.

    Args:
        name: the model as the user wrote it; label: how to name it in the message
            (``"--draft-model"``).

    Raises:
        ModelLoadError: the name cannot load; the message starts with ``label`` and the name.
    """
    key = str(name).lower()
    if key in EMBEDDED or any(key == emb.hub_id.lower() for emb in EMBEDDED.values()):
        return
    _outside(str(name), label)
