"""API keys: ``--api-key`` (or ``$LLM_PLAYGROUND_API_KEY``) makes every ``/v1`` route require
``Authorization: Bearer <key>``. Without a key the API is open, which is allowed on a loopback
address only: binding any other address without a key is refused unless
``--allow-unauthenticated`` says so."""

from __future__ import annotations

import ipaddress
import os
import secrets

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


class KeyCheck:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <api_key>``
    (constant-time comparison), checked from the headers before the body is read, so a client
    without the key learns nothing from how its body is judged (malformed JSON, too large).

    Args:
        app: the ASGI app it wraps.
        api_key: the key; ``None`` lets every request through.

    A request without the right key gets 401 in OpenAI's shape, code ``invalid_api_key``.
    """

    def __init__(self, app, api_key: str | None):
        self.app = app
        self.expected = api_key.encode("utf-8") if api_key else None

    async def __call__(self, scope, receive, send):
        if self.expected is None or scope["type"] != "http" or self._has_key(scope):
            return await self.app(scope, receive, send)
        response = APIError(401, "missing or incorrect API key (send Authorization: Bearer "
                            "<key>)", None, "invalid_api_key").response()
        await response(scope, receive, send)

    def _has_key(self, scope) -> bool:
        header = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value
                break
        scheme, _, token = header.partition(b" ")
        return scheme.lower() == b"bearer" and secrets.compare_digest(token.strip(),
                                                                      self.expected)
