"""What the engine's views may read of a runner: :class:`RunnerInfo` from ``runner.info()``, the
one declared way to see its pool and compile state (the views never probe the runner's
attributes)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunnerInfo:
    """Which forward a runner uses and the parts the page and ``stats()`` show.

    Attributes:
        backend: ``"contiguous"`` (one request at a time, own caches), ``"eager"``,
            ``"cuda_graph"`` or ``"compiled"`` (see :mod:`engine.worker.backends`).
        pool: the paged :class:`engine.worker.kv_pool.KVPool` (``None`` without one).
        compile: the compiled backend's
            :class:`engine.worker.compiled.compiled_backend.CompileState` (``None`` for the
            others).
        buckets: the batch buckets the compiled backend compiles (empty for the others).
        direct_buckets: those called without Dynamo's frame hook.
    """

    backend: str
    pool: object | None = None
    compile: object | None = None
    buckets: tuple[int, ...] = ()
    direct_buckets: tuple[int, ...] = ()
