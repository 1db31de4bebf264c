"""API keys: ``--api-key`` (or ``$LLM_PLAYGROUND_API_KEY``) makes every ``/v1`` route require
``Authorization: Bearer <key>``. Without a key the API is open, which is allowed on a loopback
address only: binding any other address without a key is refused unless
``--allow-unauthenticated`` says so."""

from __future__ import annotations

import ipaddress
import os
import secrets

from fastapi import Request

from engine.serve.errors import APIError

API_KEY_ENV = "LLM_PLAYGROUND_API_KEY"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_key(api_key: str | None) -> str | None:
    """The key to require: the flag's value, else the environment variable, else ``None``."""
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    return key or None


def check_bind(host: str, api_key: str | None, allow_unauthenticated: bool) -> None:
    """Refuse an open API on a non-loopback address.

    Raises:
        ValueError: ``host`` is not loopback, no key is set and ``allow_unauthenticated`` is
            False; the message says how to proceed.
    """
    if api_key or allow_unauthenticated or is_loopback(host):
        return
    raise ValueError(f"refusing to serve the API on {host} without an API key: set --api-key "
                     f"(or ${API_KEY_ENV}), or pass --allow-unauthenticated")


def require_key(api_key: str | None):
    """A FastAPI dependency that checks ``Authorization: Bearer <api_key>`` (constant-time
    comparison); does nothing when ``api_key`` is ``None``.

    Raises:
        APIError: 401 with code ``invalid_api_key`` for a missing or wrong key.
    """
    expected = api_key.encode("utf-8") if api_key else None

    async def check(request: Request) -> None:
        if expected is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(
                token.strip().encode("utf-8"), expected):
            raise APIError(401, "missing or incorrect API key (send Authorization: Bearer <key>)",
                           None, "invalid_api_key")

    return check
