"""The model runner: the explicit prefill and decode forward passes, then sampling.

:class:`ModelRunner` runs one sequence at a time, each with its own contiguous KV cache (any
transformers architecture); :class:`engine.worker.paged_model_runner.PagedModelRunner` packs
every sequence of a step into one forward pass over the paged KV pool. Both take a
:class:`engine.core.scheduler_output.SchedulerOutput` and return a
:class:`engine.worker.runner_output.ModelRunnerOutput` from :meth:`ModelRunner.execute`.
"""

from __future__ import annotations

import inspect
import time

import torch

from engine.core.scheduler_output import ScheduledSeq, SchedulerOutput
from engine.core.sequence import Sequence
from engine.worker.kv_cache import KVCache
from engine.worker.runner_output import ModelRunnerOutput, SampleResult
from engine.worker.sampler import Sampler



class ModelRunner:
    """Runs the model's forward pass for the engine's two kinds of step.

    Prefill feeds the whole prompt in one pass and fills the KV cache; decode feeds one new
    token and reuses the cache. Without a cache, every step recomputes the whole sequence
    (O(n²) attention work over a generation). Only the last position's logits are computed
    (``logits_to_keep=1``), as Hugging Face ``generate`` does.

    Each request's cache lives here, keyed by request id, until :meth:`release`.

    Args:
        model: a transformers ``*ForCausalLM`` in eval mode.
        sampler: the :class:`engine.worker.sampler.Sampler` (a plain one when omitted).
    """

    def __init__(self, model, sampler: Sampler | None = None):
        self.model = model
        self.sampler = sampler or Sampler()
        self.caches: dict[str, KVCache] = {}
        self.scratch: dict[str, KVCache] = {}  # a no-cache recompute's keys, between its pieces
        self.device = next(model.parameters()).device
        params = inspect.signature(model.forward).parameters
        # transformers 5 renamed ``past_key_values`` to ``cache``; accept both.
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in params else None

    def new_cache(self) -> KVCache:
        """An empty per-request KV cache for this model."""
        return KVCache(self.model.config)

    def _forward(self, ids: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        kwargs = {"input_ids": ids, "use_cache": cache is not None}
        n = ids.shape[1]
        past = cache.num_tokens if cache is not None else 0
        kwargs["attention_mask"] = torch.ones((1, past + n), dtype=torch.long, device=self.device)
        if cache is not None:
            kwargs[self._cache_kw] = cache.cache
        if self._keep_kw:
            kwargs[self._keep_kw] = 1
        with torch.inference_mode():
            out = self.model(**kwargs)
        return out.logits[0, -1]

    def prefill(self, prompt_ids: list[int], cache: KVCache | None) -> torch.Tensor:
        """One forward pass over the prompt.

        Args:
            prompt_ids: ``prompt_len`` token ids.
            cache: the request's empty cache, filled in place; ``None`` for the no-cache mode.

        Returns:
            ``[V]`` logits of the last prompt position.
        """
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        return self._forward(ids, cache)

    def decode(self, token_id: int, cache: KVCache) -> torch.Tensor:
        """One forward pass for one new token, attending to the cached keys and values.

        Args:
            token_id: the token sampled at the previous step.
            cache: the request's cache (grows by one token per layer).

        Returns:
            ``[V]`` logits for the next token.
        """
        ids = torch.tensor([[token_id]], dtype=torch.long, device=self.device)
        return self._forward(ids, cache)

    def recompute(self, all_ids: list[int]) -> torch.Tensor:
        """The no-cache decode step: a forward pass over the whole sequence so far.

        Args:
            all_ids: prompt and output ids, ``[prompt_len + generated]``.

        Returns:
            ``[V]`` logits of the last position.
        """
        ids = torch.tensor([all_ids], dtype=torch.long, device=self.device)
        return self._forward(ids, None)

    def recompute_piece(self, e: ScheduledSeq) -> torch.Tensor:
        """One piece of a no-cache recompute (the scheduler caps each step's piece, so a long
        sequence recomputed per token does not hold a whole step for itself).

        The whole sequence in one piece is :meth:`recompute`. Otherwise the pieces' keys and
        values wait in a scratch cache until the last piece, then are dropped: every output
        token still recomputes the whole sequence.

        Args:
            e: the scheduled entry: tokens ``[e.num_computed, e.num_computed + e.num_new)`` of
                ``e.seq.all_ids``; ``e.samples`` when the piece ends the sequence.

        Returns:
            ``[V]`` logits of the piece's last position.
        """
        rid, ids = e.seq.request_id, e.seq.all_ids
        if e.num_computed == 0:
            self.drop_scratch(rid)
            if e.samples:
                return self.recompute(ids)
            self.scratch[rid] = self.new_cache()
        logits = self.prefill(ids[e.num_computed:e.num_computed + e.num_new], self.scratch[rid])
        if e.samples:
            self.drop_scratch(rid)
        return logits

    def drop_scratch(self, request_id: str) -> None:
        """Free a no-cache recompute's scratch keys and values (none: nothing happens)."""
        cache = self.scratch.pop(request_id, None)
        if cache is not None:
            cache.release()



    # ---- one step ---------------------------------------------------------------------------
    def execute(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        """Run a step: each scheduled sequence alone, then sample its next token.

        Returns:
            :class:`ModelRunnerOutput`; a sequence whose forward pass or sampling raised has
            its exception in ``errors`` and the others go on.
        """
        out = ModelRunnerOutput(start_s=time.perf_counter(), end_s=0.0)
        for e in scheduler_output.all_entries:
            self.run_alone(e, out)
        out.end_s = time.perf_counter()
        return out

    def run_alone(self, e: ScheduledSeq, out: ModelRunnerOutput) -> None:
        """One sequence's forward pass (prefill, decode or, without a cache, recompute) and
        its sampling, recorded in ``out`` with its own time span."""
        seq = e.seq
        rid = seq.request_id
        start = time.perf_counter()
        try:
            if not seq.use_kv_cache:
                logits = self.recompute_piece(e)
            elif e.num_computed == 0:
                self.caches[rid] = cache = self.new_cache()
                logits = self.prefill(seq.all_ids[:e.num_new], cache)
            else:
                logits = self.decode(seq.all_ids[e.num_computed], self.caches[rid])
            if e.samples:
                out.sampled[rid] = self.sample(seq, logits)
        except Exception as exc:  # noqa: BLE001 - one request's failure must not stop others
            after_error(exc)
            out.errors[rid] = exc
        tokens = e.num_computed + e.num_new if seq.use_kv_cache else 0
        out.kv_tokens[rid] = tokens
        out.kv_bytes[rid] = self.kv_bytes(rid, tokens)
        out.spans[rid] = (start, time.perf_counter())

    def sample(self, seq: Sequence, logits: torch.Tensor) -> SampleResult:
        """The next token of one sequence from its ``[V]`` last-position logits (masked by
        its grammar first when it has a structure).

        Raises:
            ValueError: its grammar matcher failed.
        """
        if seq.structured is not None:
            from engine.structured.masking import apply_structured_masks

            errors: dict = {}
            logits = apply_structured_masks(logits[None], [seq], errors)[0]
            if errors:
                raise errors[seq.request_id]
        return self.sampler.sample(logits, seq.params, seq.all_ids, seq.output_ids,
                                   seq.generator)

    def warm_up(self) -> None:
        """Two small forward passes before serving, so the first request's TTFT holds no
        one-time set-up (cuBLAS handles and workspaces, kernel loading on a GPU)."""
        for _ in range(2):
            self.recompute([0] * 16)

    # ---- the KV cache it holds --------------------------------------------------------------
    def kv_bytes(self, request_id: str, num_tokens: int) -> int:
        """Bytes of a request's keys and values: measured from its cache tensors."""
        cache = self.caches.get(request_id)
        return cache.nbytes() if cache is not None else 0

    def kv_cache_bytes(self) -> int:
        """Bytes of every KV cache this runner holds now."""
        return sum(c.nbytes() for c in self.caches.values())

    def release(self, request_ids) -> None:
        """Drop the caches of finished requests (their memory returns to the allocator)."""
        for rid in request_ids:
            self.drop_scratch(rid)
            cache = self.caches.pop(rid, None)
            if cache is not None:
                cache.release()

    def close(self) -> None:
        """Stop any background work of the runner (the engine is shutting down)."""


def after_error(exc: BaseException) -> None:
    """After an out-of-memory error on a GPU, give torch's cached blocks back to the device,
    so the requests that go on have room (the one time the cache is emptied)."""
    if isinstance(exc, torch.OutOfMemoryError) and torch.cuda.is_available():
        torch.cuda.empty_cache()
