"""One request at a time, each on its own contiguous KV cache (any transformers architecture),
or recomputed from scratch without one.

Prefill feeds the whole prompt in one pass and fills the request's cache; decode feeds one new
token and reuses it. Without a cache every step recomputes the whole sequence (O(n²) attention
work over a generation). Only the last position's logits are computed (``logits_to_keep=1``),
as Hugging Face ``generate`` does.
"""

from __future__ import annotations

import inspect

import torch

from engine.core.scheduler_output import ScheduledSeq
from engine.worker.kv_cache import KVCache


class ContiguousBackend:
    """Runs one scheduled sequence's forward pass on its own cache; holds those caches, keyed
    by request id, until :meth:`release`.

    Args:
        model: a transformers ``*ForCausalLM`` in eval mode.
    """

    name = "contiguous"

    def __init__(self, model):
        self.model = model
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

    def forward(self, e: ScheduledSeq) -> torch.Tensor:
        """``[V]`` logits of the last position ``e`` computes: its prefill (a new cache),
        its decode token (its cache), or without a cache a piece of its recompute.

        Raises:
            KeyError: a decode of a request whose cache was never prefilled.
        """
        seq = e.seq
        if not seq.use_kv_cache:
            return self.recompute_piece(e)
        if e.num_computed == 0:
            self.caches[seq.seq_id] = cache = self.new_cache()
            return self.prefill(seq.all_ids[:e.num_new], cache)
        return self.decode(seq.all_ids[e.num_computed], self.caches[seq.seq_id])

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
        sid, ids = e.seq.seq_id, e.seq.all_ids
        if e.num_computed == 0:
            self.drop_scratch(sid)
            if e.samples:
                return self.recompute(ids)
            self.scratch[sid] = self.new_cache()
        logits = self.prefill(ids[e.num_computed:e.num_computed + e.num_new], self.scratch[sid])
        if e.samples:
            self.drop_scratch(sid)
        return logits

    def drop_scratch(self, seq_id: str) -> None:
        """Free a no-cache recompute's scratch keys and values (none: nothing happens)."""
        cache = self.scratch.pop(seq_id, None)
        if cache is not None:
            cache.release()

    def kv_bytes(self, seq_id: str) -> int:
        """Bytes of a sequence's keys and values: measured from its cache tensors (0 without)."""
        cache = self.caches.get(seq_id)
        return cache.nbytes() if cache is not None else 0

    def kv_cache_bytes(self) -> int:
        """Bytes of every KV cache held now."""
        return sum(c.nbytes() for c in self.caches.values())

    def release(self, seq_ids) -> None:
        """Drop the caches of finished sequences (their memory returns to the allocator)."""
        for sid in seq_ids:
            self.drop_scratch(sid)
            cache = self.caches.pop(sid, None)
            if cache is not None:
                cache.release()
