"""A request body read, parsed and checked in a worker thread, never on the event loop.

FastAPI parses a body and validates its model on the event loop: a 2 MB body, 60,000 empty
messages or a ``logit_bias`` of 100,000 keys held every other request (and ``/health``) for
seconds. The routes take the raw bytes instead and hand them to :func:`parse_body` through
``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import json
import re

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from engine.serve.errors import APIError

_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:]')


def parse_body(model, raw: bytes, route: str):
    """``raw`` as an instance of the pydantic ``model`` (a request class).

    Args:
        model: ``ChatCompletionRequest`` or ``CompletionRequest``.
        raw: the body's bytes.
        route: the route's path, for the empty-body message.

    Raises:
        APIError: 400 for an empty body, text that is not JSON, or JSON nested too deeply
            for the parser (naming the top-level field it is in).
        RequestValidationError: a field of the wrong type or range (answered as a 400 naming
            the field by :func:`engine.serve.errors.install`).
    """
    if not raw.strip():
        needed = "messages" if route.endswith("/chat/completions") else "prompt"
        raise APIError(400, f"the request body is empty: send a JSON object with model and "
                       f"{needed}", "model", "invalid_value")
    try:
        data = json.loads(raw)
    except RecursionError:
        field = deep_field(raw.decode("utf-8", "replace"))
        raise APIError(400, f"{field or 'the request body'}: nested too deeply", field,
                       "invalid_value") from None
    except ValueError:
        raise APIError(400, "the request body is not valid JSON", None, "invalid_json") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)[:1]) from None


def deep_field(text: str, limit: int = 100) -> str | None:
    """The top-level field of a JSON object's text whose value nests deeper than ``limit``."""
    depth, key, last = 0, None, None
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if tok in "{[":
            depth += 1
            if depth > limit:
                return key
        elif tok in "}]":
            depth -= 1
        elif tok == ":":
            if depth == 1:
                key = last
        else:
            last = tok[1:-1] if depth == 1 else last
    return None


def check_token_ids(params, vocab_size: int | None) -> None:
    """Refuse a ``stop_token_ids`` entry outside the model's vocabulary.

    Raises:
        APIError: 400 naming ``stop_token_ids``.
    """
    if vocab_size is None:
        return
    for tid in params.stop_token_ids:
        if not 0 <= tid < vocab_size:
            raise APIError(400, f"stop_token_ids must be token ids in [0, {vocab_size}), got "
                           f"{str(tid)[:40]}", "stop_token_ids", "invalid_value")
