"""The engine's read-only views for the page and the API: counts, the block pool, memory.

:class:`EngineViews` is a mixin of :class:`engine.engine.LLMEngine`: each view reads the
scheduler, block manager and runner under the engine's lock and returns plain data.
"""

from __future__ import annotations

from engine.core.sequence_group import kv_sharing
from engine.protocol import (BlockPoolSnapshot, BlockTable, CompileStatus, EngineCapabilities,
                             EngineStats)


class EngineViews:
    """``stats``, ``block_snapshot``, ``memory_snapshot`` and the rest of
    :class:`engine.protocol.EngineClient`'s read side for an ``LLMEngine`` (which owns
    ``_lock``, ``scheduler``, ``block_manager``, ``runner``, ``output_processor``, ``probe``,
    ``drafter``, ``rolling``, ``pool``, ``loaded``, ``paged`` and ``batching_note``)."""

    remote_view = None  # the model runs here: the page draws its own badge and panels

    @property
    def capabilities(self) -> EngineCapabilities:
        """A local engine: traces, lessons and per-session prefix caches; the block pool
        when paged; a resettable recent-requests table when telemetry is on."""
        return EngineCapabilities(remote=False, supports_blocks=bool(self.paged),
                                  supports_traces=True, supports_lessons=True,
                                  supports_cache_salt=True,
                                  supports_rolling_reset=self.rolling is not None)

    @property
    def pool_bytes(self) -> int | None:
        """Bytes of the paged KV pool as allocated, ``num_blocks × block_bytes`` (``None`` without
        one): the budget (``EngineConfig.kv_cache_bytes``) rounded down to whole blocks. The
        memory breakdown's ``kv_cache`` part is this same figure before, during and after requests."""
        return self.pool.nbytes if self.pool is not None else None

    def rolling_summary(self) -> dict:
        """``rolling.summary()`` (``{}`` with telemetry off)."""
        return self.rolling.summary() if self.rolling is not None else {}

    @property
    def rolling_version(self) -> int | None:
        """Changes on every finished request and reset (``None`` with telemetry off)."""
        return self.rolling.version if self.rolling is not None else None

    def reset_rolling(self) -> None:
        """Empty the recent-requests summary."""
        if self.rolling is not None:
            self.rolling.reset()

    def experiment_model(self):
        """The :class:`engine.model.model_info.LoadedModel` this engine serves (the lessons'
        experiments load their own engines and variants from it)."""
        return self.loaded

    def detokenize(self, token_ids: list[int]) -> str:
        """The text of ``token_ids`` (the model's tokenizer, special tokens kept)."""
        return self.tokenizer.decode(list(token_ids))

    def stats(self) -> EngineStats:
        """Counts (waiting, running, finished, aborted, failed, queue_max), live KV bytes,
        and with paged attention the block pool (blocks used/free/cached, preemptions,
        prefix-cache hit rate) and sharing: ``kv_tokens_logical`` (tokens the running sequences
        would hold as independent caches), ``kv_tokens_physical`` (slots of the distinct blocks
        they hold), ``kv_blocks_shared`` (blocks held by more than one)."""
        with self._lock:
            running = list(self.scheduler.running)
            out = {"waiting": len(self.scheduler.waiting), "running": len(running),
                   "queue_max": self.scheduler.max_queue, **self.output_processor.counts,
                   "kv_bytes_live": sum(self.runner.kv_bytes(s.seq_id, s.num_computed)
                                        for s in running if s.use_kv_cache),
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
            return EngineStats(**out)

    def compile_status(self) -> CompileStatus:
        """Which decode step runs (:mod:`engine.worker.compiled`), for the badge and benches:
        a :class:`engine.protocol.CompileStatus` (the runner's compile state, its buckets and
        the attention path)."""
        info = self.runner.info()
        attention = self._attention_path(info.pool)
        state = info.compile
        if state is None:
            return CompileStatus(**attention)
        compiled = state.status != "off" and bool(state.ready)
        return CompileStatus(path="compiled" if compiled else "eager", status=state.status,
                             buckets=tuple(info.buckets), ready=tuple(sorted(state.ready)),
                             compile_s=round(state.total_compile_s, 2), cache_hits=state.cache_hits,
                             error=state.error, steps_compiled=state.steps_compiled,
                             steps_eager=state.steps_eager, direct=tuple(info.direct_buckets),
                             compiling_s=round(state.elapsed_s, 1) if state.status == "compiling" else 0.0,
                             prompts=state.prompts, prompts_note=state.prompts_note,
                             compiler=state.compiler, **attention)

    @staticmethod
    def _attention_path(pool) -> dict:
        """``{"attention": "kernel" | "sdpa", "attention_note": why not the kernel}`` for the
        runner's paged pool (``None``: no paged KV cache)."""
        import torch

        from engine.worker.kernels import decode_attention as kernel

        if pool is None:
            return {"attention": "sdpa", "attention_note": "no paged KV cache"}
        probe = torch.empty(0, dtype=pool.compute_dtype, device=pool.k[0].device)
        if kernel.applies(probe, pool.k[0].dtype):
            return {"attention": "kernel", "attention_note": ""}
        why = kernel.unavailable_reason() or (
            "fp32 keeps SDPA (the parity reference)" if pool.compute_dtype == torch.float32 else
            "fp8 KV cache" if pool.fp8 else f"{pool.k[0].device.type} device")
        return {"attention": "sdpa", "attention_note": why}

    def wait_compiled(self, timeout: float = 900.0) -> CompileStatus:
        """Block until the compiled decode step is ready for every bucket, failed, or is off
        (at most ``timeout`` seconds); returns :meth:`compile_status`."""
        import time

        end = time.monotonic() + timeout
        while True:
            status = self.compile_status()
            if status.status != "compiling" or time.monotonic() > end:
                return status
            time.sleep(0.2)

    def block_snapshot(self) -> BlockPoolSnapshot:
        """The block pool now, for drawing PagedAttention's picture.

        Returns:
            A :class:`engine.protocol.BlockPoolSnapshot` (block size, block count, per-cell
            "free" / "cached" / "used" state, blocks per cell, one :class:`BlockTable` per
            running sequence, whose ``tokens`` counts the slots computed or being computed by
            the step in flight); :meth:`BlockPoolSnapshot.empty` without paging.
        """
        if not self.paged:
            return BlockPoolSnapshot.empty()
        with self._lock:
            bm = self.block_manager
            tables = [BlockTable(request_id=s.request_id, blocks=list(s.block_table),
                                 tokens=s.num_computed + s.num_scheduled, index=s.index,
                                 ref_counts=[bm.blocks[b].ref_count for b in s.block_table])
                      for s in self.scheduler.running if s.block_table]
            state, per_cell = bm.block_states()
        return BlockPoolSnapshot(block_size=bm.block_size, num_blocks=len(bm.blocks), state=state,
                                 blocks_per_cell=per_cell, tables=tables)

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
