"""The engine's read-only views for the page and the API: counts, the block pool, memory.

:class:`EngineViews` is a mixin of :class:`engine.engine.LLMEngine`: each view reads the
scheduler, block manager and runner under the engine's lock and returns plain data.
"""

from __future__ import annotations

from engine.core.sequence_group import kv_sharing


class EngineViews:
    """``stats``, ``block_snapshot`` and ``memory_snapshot`` of an ``LLMEngine`` (which owns
    ``_lock``, ``scheduler``, ``block_manager``, ``runner``, ``output_processor``, ``probe``,
    ``drafter``, ``paged`` and ``batching_note``)."""

    def stats(self) -> dict:
        """Counts (waiting, running, finished, aborted, failed, queue_max), live KV bytes,
        and with paged attention the block pool (blocks used/free/cached, preemptions,
        prefix-cache hit rate) and sharing: ``kv_tokens_logical`` (tokens the running sequences
        would hold as independent caches), ``kv_tokens_physical`` (slots of the distinct blocks
        they hold), ``kv_blocks_shared`` (blocks held by more than one)."""
        with self._lock:
            running = list(self.scheduler.running)
            out = {"waiting": len(self.scheduler.waiting), "running": len(running),
                   "queue_max": self.scheduler.max_queue, **self.output_processor.counts,
                   "kv_bytes_live": sum(self.runner.kv_bytes(s.request_id, s.num_computed)
                                        for s in running),
                   "batching": self.paged, "batching_note": self.batching_note,
                   "preemptions": self.scheduler.num_preemptions}
            if self.paged:
                share = kv_sharing(running, self.block_manager)
                out.update(kv_tokens_logical=share["logical_tokens"],
                           kv_tokens_physical=share["physical_tokens"],
                           kv_blocks_shared=len(share["ref_counts"]))
                b = self.block_manager.stats()
                out.update(blocks_total=b.num_blocks, blocks_used=b.used, blocks_free=b.free,
                           blocks_cached=b.cached, block_size=b.block_size,
                           prefix_hit_rate=b.hit_rate)
            return out

    def compile_status(self) -> dict:
        """Which decode step runs (:mod:`engine.worker.compiled`), for the badge and benches.

        Returns:
            ``path`` (``"compiled"`` once at least one batch bucket is compiled, else
            ``"eager"``), ``status`` (``"off"``, ``"compiling"``, ``"ready"``, ``"failed"``),
            ``buckets`` (all batch buckets), ``ready`` (those compiled), ``compile_s`` (seconds,
            tracing included, over the ready buckets), ``cache_hits`` (inductor cache hits:
            > 0 on a start that found its kernels on disk), ``error``, ``steps_compiled`` and
            ``steps_eager`` (decode-only steps run each way).
        """
        state = getattr(self.runner, "state", None)
        if state is None:
            return {"path": "eager", "status": "off", "buckets": [], "ready": [],
                    "compile_s": 0.0, "cache_hits": 0, "error": "", "steps_compiled": 0,
                    "steps_eager": 0}
        compiled = state.status != "off" and bool(state.ready)
        return {"path": "compiled" if compiled else "eager", "status": state.status,
                "buckets": list(self.runner.buckets), "ready": list(state.ready),
                "compile_s": round(state.total_compile_s, 2), "cache_hits": state.cache_hits,
                "error": state.error, "steps_compiled": state.steps_compiled,
                "steps_eager": state.steps_eager}

    def wait_compiled(self, timeout: float = 900.0) -> dict:
        """Block until the compiled decode step is ready for every bucket, failed, or is off
        (at most ``timeout`` seconds); returns :meth:`compile_status`."""
        import time

        end = time.monotonic() + timeout
        while True:
            status = self.compile_status()
            if status["status"] != "compiling" or time.monotonic() > end:
                return status
            time.sleep(0.2)

    def block_snapshot(self) -> dict:
        """The block pool now, for drawing PagedAttention's picture.

        Returns:
            ``{"block_size", "num_blocks", "state": per-cell "free" / "cached" / "used",
            "blocks_per_cell", "tables": [{"request_id", "blocks", "tokens"}...]}`` where a
            cell is one block unless the pool has more than 4,096, and ``tokens`` counts the
            slots computed or being computed by the step in flight; each table also has the
            sample's or beam's ``index`` and each block's ``ref_counts`` (above 1: shared by
            forked sequences or the prefix cache); empty without paging.
        """
        if not self.paged:
            return {}
        with self._lock:
            bm = self.block_manager
            tables = [{"request_id": s.group_id, "blocks": list(s.block_table),
                       "tokens": s.num_computed + s.num_scheduled, "index": s.index,
                       "ref_counts": [bm.blocks[b].ref_count for b in s.block_table]}
                      for s in self.scheduler.running if s.block_table]
            state, per_cell = bm.block_states()
        return {"block_size": bm.block_size, "num_blocks": len(bm.blocks), "state": state,
                "blocks_per_cell": per_cell, "tables": tables}

    def memory_snapshot(self):
        """The memory breakdown now (``None`` with telemetry off)."""
        if self.probe is None:
            return None
        with self._lock:
            kv = self._kv_bytes()
        memory = self.probe.snapshot(kv_bytes=kv)
        self._note_draft(memory)
        return memory

    def _kv_bytes(self) -> int:
        """KV cache bytes: the runner's cache (the paged pool) plus the draft model's caches,
        which live outside the pool (:mod:`engine.spec_decode.draft_proposer`)."""
        kv = self.runner.kv_cache_bytes()
        return kv + self.drafter.cache_bytes() if self.drafter is not None else kv

    def _note_draft(self, memory) -> None:
        """Say in ``memory.notes`` how much of weights and KV cache is the draft model's."""
        if self.drafter is not None and memory is not None:
            memory.notes.append(
                f"weights include the draft model's {self.drafter.weights_bytes:,} B; kv_cache "
                f"includes its per-request caches, {self.drafter.cache_bytes():,} B, kept "
                f"outside the paged pool")
