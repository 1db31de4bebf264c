"""The app factories: :func:`create_api` (the OpenAI routes, mounted at ``/v1``) and
:func:`create_server` (those plus ``GET /health`` and ``GET /metrics``)."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.routing import Mount

from engine.serve import errors
from engine.serve.auth import KeyCheck
from engine.serve.errors import APIError
from engine.serve.limits import BodyLimit, api_body_limit
from engine.serve.metrics import CONTENT_TYPE, EngineMetrics
from engine.serve.parsing import check_token_ids, parse_body
from engine.serve.protocol import ChatCompletionRequest, CompletionRequest
from engine.serve.requests import submit_choices
from engine.serve.structured import compile_off_loop
from engine.serve.responses import Builder
from engine.serve.streaming import ClientGone, EventStream, chunks, wait_all


@dataclass
class ServeState:
    """What the routes share: the engine, the served model's names, and whether the server is
    closing (then every new request gets 503).

    Attributes:
        engine: the running ``LLMEngine``.
        model_name: the name ``/v1/models`` lists and responses carry.
        aliases: other names a request's ``model`` may use (the ``--model`` value given).
        closing: set when the server begins to shut down.
    """

    engine: object
    model_name: str
    aliases: set[str] = field(default_factory=set)
    closing: bool = False
    started: int = field(default_factory=lambda: int(time.time()))

    def check_model(self, name: str) -> None:
        """Raises ``APIError`` 404 (``model_not_found``) for a model this server does not serve."""
        if name != self.model_name and name not in self.aliases:
            raise APIError(404, f"model {name[:80]!r} does not exist here; this server serves "
                           f"{self.model_name!r}", "model", "model_not_found")

    def check_open(self) -> None:
        """Raises ``APIError`` 503 while the server is shutting down."""
        if self.closing:
            raise APIError(503, "the server is shutting down", None, "shutting_down")


def create_api(state: ServeState, api_key: str | None = None) -> FastAPI:
    """The OpenAI routes as an app of their own, to mount at ``/v1``: ``POST /chat/completions``,
    ``POST /completions``, ``GET /models``. Every error is in OpenAI's shape
    (:mod:`engine.serve.errors`); with ``api_key`` every route needs
    ``Authorization: Bearer <api_key>``, checked first. A body over
    :func:`engine.serve.limits.api_body_limit` is refused with 413 before it is read; the
    body is parsed and checked, a structure compiled and the prompt tokenized on worker
    threads, never on the event loop."""
    api = FastAPI(title="LLM playground engine (OpenAI-compatible)", docs_url=None,
                  redoc_url=None, openapi_url=None)
    errors.install(api)
    api.add_middleware(BodyLimit, max_bytes=api_body_limit(state.engine))
    api.add_middleware(KeyCheck, api_key=api_key)  # added last: runs first

    @api.get("/models")
    async def models():
        info = state.engine.info
        return {"object": "list", "data": [{
            "id": state.model_name, "object": "model", "created": state.started,
            "owned_by": "llm-playground", "root": info.name,
            "max_model_len": int(getattr(state.engine, "max_seq_tokens", info.context_len))}]}

    @api.post("/chat/completions")
    async def chat_completions(request: Request):
        state.check_open()
        body, messages, params, top = await _checked(state, request, ChatCompletionRequest)
        return await _complete(state, request, "chat", messages, params, top, body)

    @api.post("/completions")
    async def completions(request: Request):
        state.check_open()
        body, prompt, params, top = await _checked(state, request, CompletionRequest)
        return await _complete(state, request, "completion", prompt, params, top, body)

    return api


async def _checked(state: ServeState, request: Request, model) -> tuple:
    """``(body, prompt or messages, sampling params, top logprobs)`` of a request, read here
    and parsed and checked on a worker thread.

    Raises:
        APIError: 400 naming the field at fault, 404 for an unknown model.
    """
    raw = await request.body()
    vocab = getattr(getattr(getattr(state.engine, "structured", None), "compiler", None),
                    "vocab_size", None)

    def check():
        body = parse_body(model, raw, request.url.path)
        state.check_model(body.model)
        prompt, params, top = body.checked()
        check_token_ids(params, vocab)
        return body, prompt, params, top

    return await anyio.to_thread.run_sync(check)


async def _complete(state: ServeState, request: Request, kind: str, prompt, params, top, body):
    """Submit the request's choices, then stream them or wait for them all."""
    rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)
    await compile_off_loop(state.engine, params, body.structure()[1])  # a structure's grammar
    choices = await anyio.to_thread.run_sync(  # tokenizing takes time: off the event loop
        lambda: submit_choices(state.engine, prompt, params, body.n, raw=(kind != "chat"),
                               id_prefix=rid))
    builder = Builder(kind, state.model_name, rid, top)
    if body.stream:
        return EventStream(chunks(builder, choices, body.include_usage), on_close=choices.abort)
    try:
        await wait_all(choices, request)
    except ClientGone:
        return Response(status_code=499)  # nobody is listening; the requests were aborted
    outputs = choices.outputs()
    failed = next((o for o in outputs if o.finish_reason == "error"), None)
    if failed is not None:
        raise APIError(500, f"the engine failed on this request: {failed.error}", None,
                       "engine_error")
    return JSONResponse(builder.response(outputs, choices.step_events()))


def health_response(state: ServeState) -> JSONResponse:
    """``GET /health``: 200 ``{"status": "ok"}``, or 503 once ``state`` is closing (shared by
    ``python -m engine serve`` and the page's mount, :mod:`app.server.openai_mount`)."""
    if state.closing:
        return JSONResponse({"status": "shutting down"}, status_code=503)
    return JSONResponse({"status": "ok"})


def create_server(engine, model_name: str | None = None, *, api_key: str | None = None,
                  aliases: set[str] | None = None, include_prefix: bool = True) -> FastAPI:
    """The whole server of ``python -m engine serve``: the OpenAI routes under ``/v1``,
    ``GET /health`` (200, or 503 while closing) and ``GET /metrics`` (Prometheus text).

    Args:
        engine: a running ``LLMEngine`` (the caller shuts it down).
        model_name: served name (default: the engine's model name).
        api_key: required as ``Authorization: Bearer`` on ``/v1`` routes when set.
        aliases: other accepted values of a request's ``model``.
        include_prefix: export the prefix-cache counters (see :class:`EngineMetrics`).

    Returns:
        The FastAPI app; ``app.state.serve`` is its :class:`ServeState` and
        ``app.state.metrics`` its :class:`EngineMetrics`.
    """
    state = ServeState(engine, model_name or engine.info.name, set(aliases or ()))
    metrics = EngineMetrics(engine, state.model_name, include_prefix)
    app = FastAPI(title="LLM playground engine", docs_url=None, redoc_url=None,
                  openapi_url=None, routes=[Mount("/v1", create_api(state, api_key))])
    errors.install(app)
    app.state.serve, app.state.metrics = state, metrics

    @app.get("/health")
    async def health():
        return health_response(state)

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return app
