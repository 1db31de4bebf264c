"""Draft-model drafting: a smaller model of the target's family proposes ``k`` greedy tokens.

The draft model is a plain transformers ``*ForCausalLM`` (loaded by
:mod:`engine.spec_decode.draft_loader`) that runs beside the target on the same device and in
the same compute dtype. Each request that drafts with it keeps its own transformers
``DynamicCache``, so a proposal feeds only the tokens the cache has not seen (the model's token
of the last step, plus the last accepted draft when all were accepted) and then one token per
further draft: about ``k`` one-token draft passes per step, never a re-run of the context.

Where its memory lives: **not** in the engine's paged KV pool. The draft's caches are a second,
unpaged store: per request, for each draft layer, a K and a V tensor of shape
``[1, kv_heads, tokens, head_dim]`` in the compute dtype, on the target's device. They grow
with the request, are cropped back to the accepted tokens after each verification and are
freed when the request finishes or aborts (:meth:`DraftModelProposer.release`, called by the
engine). A preempted request keeps its draft cache (its tokens stay a prefix of the
sequence). :meth:`DraftModelProposer.cache_bytes` and ``weights_bytes`` are counted in the
engine's memory telemetry (its ``kv_cache`` and ``weights`` parts, with a note).

When it runs: :meth:`DraftModelProposer.propose` is called on the engine thread while the
scheduler plans a step (``engine.spec_decode.scheduling.draft_tokens``), so its passes come
before the step's verification pass and count in the request's decode time, not in the
step's forward-pass time; drafting pauses on low acceptance like prompt lookup
(:class:`engine.spec_decode.spec_state.SpecState`), and then no draft pass runs at all.

Sampling: the drafts are the draft model's argmax, a deterministic function of the context, so
the proposal distribution ``q`` is one-hot at each draft, exactly as for prompt lookup; the
existing rejection rule with ``q`` one-hot (:mod:`engine.spec_decode.rejection_sampler`) keeps
every emitted token distributed as the target's ``p``. Greedy and sampling requests both work.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field

import torch

from engine.spec_decode.rejection_sampler import common_prefix_len

log = logging.getLogger("engine")


@dataclass
class _DraftCache:
    """One request's draft KV cache and the token ids it holds (``cache`` covers ``ids``)."""

    cache: object
    ids: list[int] = field(default_factory=list)


class DraftModelProposer:
    """Greedy drafts from a draft model, with one KV cache per request.

    Args:
        model: the draft ``*ForCausalLM`` in eval mode on the target's device and dtype.
        name: how the user named it (for messages).
        max_positions: its context window in tokens; no drafts past it.

    Attributes:
        weights_bytes: bytes of the draft's parameters and buffers (unique storages).
        caches: request id -> its :class:`_DraftCache` (only requests that drafted).
    """

    def __init__(self, model, name: str, max_positions: int):
        from engine.model.accounting import weight_bytes

        self.model, self.name, self.max_positions = model, name, max_positions
        self.device = next(model.parameters()).device
        self.weights_bytes = weight_bytes(model)
        self.caches: dict[str, _DraftCache] = {}
        # transformers renamed forward's past_key_values to cache; use whichever it takes
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    def _new_cache(self):
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.model.config)
        except TypeError:  # releases whose DynamicCache takes no config
            return DynamicCache()

    def for_request(self, request_id: str) -> "RequestDrafter":
        """The drafter one request's :class:`engine.spec_decode.spec_state.SpecState` calls."""
        return RequestDrafter(self, request_id)

    @torch.inference_mode()
    def propose(self, request_id: str, token_ids: list[int], k: int) -> list[int]:
        """Up to ``k`` greedy draft tokens to follow ``token_ids``.

        The request's cache is first cropped to the longest prefix it shares with
        ``token_ids`` (after a verification: the accepted tokens), then the unseen tokens are
        fed in one pass and each draft in one more. Afterwards the cache holds ``token_ids``
        plus the first ``k - 1`` drafts.

        Args:
            request_id: whose cache to use (created on the first call).
            token_ids: the sequence so far (prompt then output), ``[L]`` ids.
            k: most tokens to propose.

        Returns:
            ``k`` draft ids, or ``[]`` when ``k < 1``, ``token_ids`` is empty or
            ``L + k`` exceeds the draft's context window.
        """
        L = len(token_ids)
        if k < 1 or L < 1 or L + k > self.max_positions:
            return []
        entry = self.caches.get(request_id)
        if entry is None:
            entry = self.caches[request_id] = _DraftCache(self._new_cache())
        n = min(common_prefix_len(entry.ids, token_ids), L - 1)  # feed at least one token
        self._crop(entry, n)
        feed, drafts = list(token_ids[n:]), []
        for i in range(k):
            x = torch.tensor([feed], dtype=torch.long, device=self.device)
            out = self.model(input_ids=x, use_cache=True, logits_to_keep=1,
                             **{self._cache_arg: entry.cache})
            entry.ids.extend(feed)
            nxt = int(torch.argmax(out.logits[0, -1]))
            drafts.append(nxt)
            feed = [nxt]
        return drafts

    def _crop(self, entry: _DraftCache, n: int) -> None:
        """Keep the first ``n`` tokens of ``entry``'s cache (``cache.crop`` of the rest)."""
        drop = len(entry.ids) - n
        if drop <= 0:
            return
        if n == 0:
            entry.cache = self._new_cache()
        else:
            entry.cache.crop(-drop)   # a negative count removes that many tokens
        del entry.ids[n:]

    def cached_tokens(self, request_id: str) -> int:
        """Tokens in the request's draft cache (0 when it has none), as the cache reports."""
        entry = self.caches.get(request_id)
        return int(entry.cache.get_seq_length()) if entry is not None else 0

    def release(self, request_id: str) -> bool:
        """Free the request's draft cache (it finished or was aborted).

        Returns:
            True when it had one.
        """
        return self.caches.pop(request_id, None) is not None

    def cache_bytes(self) -> int:
        """Bytes of every live draft cache: the sum of its K and V tensors' ``nbytes``
        (``[1, kv_heads, tokens, head_dim]`` per layer each)."""
        total = 0
        for entry in list(self.caches.values()):
            for layer in getattr(entry.cache, "layers", []):
                for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                    if isinstance(t, torch.Tensor):
                        total += t.numel() * t.element_size()
        return total


class RequestDrafter:
    """One request's view of a :class:`DraftModelProposer` (the ``propose`` a
    :class:`engine.spec_decode.spec_state.SpecState` calls); a failing draft pass is logged and
    turns drafting off for the request instead of failing the engine step."""

    def __init__(self, proposer: DraftModelProposer, request_id: str):
        self.proposer, self.request_id = proposer, request_id
        self.error = ""

    def propose(self, token_ids: list[int], k: int) -> list[int]:
        """Up to ``k`` drafts after ``token_ids`` (``[L]`` ids), or ``[]`` after a failure."""
        if self.error:
            return []
        try:
            return self.proposer.propose(self.request_id, token_ids, k)
        except Exception as exc:  # noqa: BLE001 - plain decoding goes on without drafts
            log.exception("draft model %s failed for %s", self.proposer.name, self.request_id)
            self.error = f"draft model failed: {type(exc).__name__}: {exc}"
            self.proposer.release(self.request_id)
            return []
