"""What a client sees when a handler fails: a short message with an error id, never a traceback.

A refusal (a bad value, a full queue) is the client's business and goes back as it is. Anything
else is a server failure: its traceback goes to the server log (logger ``app``) under a fresh
error id, and the client gets only ``internal error (request <id>); details are in the server
log``, so no server path, file name or code line leaves the machine.

:func:`guard` wraps every event handler and API function of the page; :func:`log_internal` is
the same for plain code that reports the failure itself (the page's Generate stream).
"""

from __future__ import annotations

import functools
import inspect
import logging
import secrets

log = logging.getLogger("app")


def log_internal(where: str, exc: BaseException) -> str:
    """Log ``exc`` with its traceback under a new error id; returns the client's message."""
    error_id = "err-" + secrets.token_hex(4)
    log.error("internal error %s in %s: %s", error_id, where, type(exc).__name__,
              exc_info=(type(exc), exc, exc.__traceback__))
    return f"internal error (request {error_id}); details are in the server log"


def _to_client(where: str, exc: Exception):
    import gradio as gr

    return gr.Error(log_internal(where, exc), print_exception=False)


def guard(fn):
    """``fn`` (a function or a generator function) with unexpected exceptions turned into
    :func:`log_internal`'s short ``gr.Error``; ``gr.Error`` itself passes through unchanged.

    The wrapper keeps ``fn``'s signature (Gradio reads it for ``gr.Request``, ``gr.Progress``
    and the API's parameters) and its kind (Gradio streams generator functions).
    """
    import gradio as gr

    where = getattr(fn, "__qualname__", repr(fn))
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:  # noqa: BLE001 - the point: nothing unexpected leaks
                raise _to_client(where, exc) from None
    else:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except gr.Error:
                raise
            except Exception as exc:  # noqa: BLE001
                raise _to_client(where, exc) from None
    wrapper.guarded = True
    return wrapper
