"""The OpenAI-compatible API on the page's own port: ``/v1/...`` (the routes of
``python -m engine serve``), ``/metrics`` and ``/health``, sharing the page's engine.

Requests through ``/v1`` share one prefix cache among themselves (no salt), never the page
sessions' private ones. The prefix-cache counters of ``/metrics`` appear only with
``--shared-prefix-cache``: where each page session has its own cache, engine-wide hits would
tell of other users' prompts.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route


def mount_api(server_app, engine, *, host: str, api_key: str | None = None,
              allow_unauthenticated: bool = False, include_prefix: bool = False,
              aliases: set[str] | None = None) -> str | None:
    """Add ``/v1``, ``/metrics`` and ``/health`` in front of the page's routes of a launched Gradio app.

    Args:
        server_app: the running app (``demo.server_app`` after ``launch``).
        engine: the page's ``LLMEngine``.
        host: the address the page binds (an open API is refused off loopback).
        api_key: required as ``Authorization: Bearer`` on ``/v1`` (``None``: the flag's
            environment variable, else none).
        allow_unauthenticated: allow an open API on a non-loopback address.
        include_prefix: export the prefix-cache counters (see the module's docstring).
        aliases: other accepted values of a request's ``model``.

    Returns:
        ``None`` when mounted, else the one-line reason it was not (no key off loopback).
    """
    from engine.serve.app import ServeState, create_api, health_response
    from engine.serve.auth import check_bind, resolve_key
    from engine.serve.metrics import CONTENT_TYPE, EngineMetrics

    key = resolve_key(api_key)
    try:
        check_bind(host, key, allow_unauthenticated)
    except ValueError as exc:
        return str(exc)
    state = ServeState(engine, engine.info.name, set(aliases or ()))
    metrics = EngineMetrics(engine, state.model_name, include_prefix)

    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    async def health(request: Request) -> Response:
        return health_response(state)

    routes = [Mount("/v1", app=create_api(state, key)), Route("/metrics", prometheus),
              Route("/health", health)]
    server_app.router.routes[0:0] = routes  # before Gradio's own routes
    server_app.state.openai = state
    return None
