"""The model runner: the explicit prefill and decode forward passes on a transformers model."""

from __future__ import annotations

import inspect

import torch

from .kv_cache import KVCache


class ModelRunner:
    """Runs the model's forward pass for the engine's two kinds of step.

    Prefill feeds the whole prompt in one pass and fills the KV cache; decode feeds one new
    token and reuses the cache. Without a cache, every step recomputes the whole sequence
    (O(n²) attention work over a generation). Only the last position's logits are computed
    (``logits_to_keep=1``), as Hugging Face ``generate`` does.

    Args:
        model: a transformers ``*ForCausalLM`` in eval mode.
    """

    def __init__(self, model):
        self.model = model
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
