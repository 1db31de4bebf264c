"""Whether the Hugging Face Hub can be reached, decided quickly (so offline users fail fast)."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` asks for no Hub access."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def hub_reachable(timeout: float = 3.0) -> tuple[bool, str]:
    """Try one TCP connection to the Hub endpoint (``$HF_ENDPOINT`` or huggingface.co).

    Without this check a missing network shows up as many retries over tens of seconds.

    Returns:
        ``(True, "")`` when a connection opened, else ``(False, reason)``.
    """
    if hub_offline():
        return False, "HF_HUB_OFFLINE is set"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, ""
    except OSError as exc:
        return False, f"the Hugging Face Hub ({host}:{port}) is unreachable: {exc}"


def cached_on_disk(repo_id: str, filename: str = "config.json") -> bool:
    """Whether ``filename`` of ``repo_id`` is already in the local Hub cache."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, filename)
    except Exception:  # noqa: BLE001 - an odd id or cache layout: treat as not cached
        return False
    return isinstance(found, str)
