"""Calling a compiled batch bucket without Dynamo's frame hook.

``torch.compile`` replaces a traced frame's bytecode with one that calls the compiled graph and
keeps it in a cache entry of the traced code; on every call Dynamo's frame hook looks that entry
up and checks its guards (about 1 ms of a 7 ms batch-1 decode step on CPU). The compiled runner
traces :func:`decode_step`, a plain function, so once a bucket is compiled :func:`find` can make
that entry's bytecode a function of its own, over the same globals (where Dynamo put the graph),
and the backend calls it directly (``DIRECT_CALL`` in :mod:`.compiled_backend`).
"""

from __future__ import annotations

import logging
import types

log = logging.getLogger("engine")


def decode_step(forward, input_ids, positions, slots, blocks, lens):
    """The frame ``torch.compile`` traces: the compact forward's hidden states
    (:meth:`engine.worker.compiled.llama_decode.LlamaDecodeForward.hidden_states`) for a
    bucket's buffers or a prefill's rows; the LM head runs after it, outside the graph."""
    return forward.hidden_states(input_ids, positions, slots, blocks, lens)


def private_decode_step():
    """A copy of :func:`decode_step` with a code object of its own.

    Dynamo keeps its cache entries, their guards and the recompile count per code object. Each
    compiled runner traces its own copy, so its graphs are its own: another engine of the
    process (a lesson's or a benchmark's, another dtype or model) neither fills the serving
    runner's cache up to the recompile limit (``FailOnRecompileLimitHit``) nor leaves graphs
    that its unguarded calls (``skip_guard_eval_unsafe``) could pick.
    """
    code = decode_step.__code__.replace()  # a new code object, the same bytecode
    return types.FunctionType(code, decode_step.__globals__, "decode_step")


def find(f_locals: dict, step=None):
    """The direct function for a call of ``step`` (:func:`decode_step` or a
    :func:`private_decode_step` copy) with ``f_locals`` (its arguments by name): made from the
    cache entry of ``step``'s code whose guards (all of them, checked here once) accept these
    arguments. Called as ``fn(forward, input_ids, ...)``.

    Returns ``None`` when no entry accepts them, or when this torch's Dynamo cannot list its
    cache entries (a private API: its absence must not fail compiling; logged).
    """
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        step = step or decode_step
        entries = _debug_get_cache_entry_list(step.__code__)
    except Exception:  # noqa: BLE001 - see above
        log.info("Dynamo's cache entries can't be listed; no direct calls", exc_info=True)
        return None
    for entry in entries:
        if not entry.code.co_freevars and entry.guard_manager.check(f_locals):
            return types.FunctionType(entry.code, step.__globals__, "decode_step")
    return None
