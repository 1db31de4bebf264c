"""The model runner: the explicit prefill and decode forward passes on a transformers model."""

from __future__ import annotations

import contextlib
import inspect

import torch

from .kv_cache import KVCache
from .weight_stationary import WeightStationaryLinear, use_weight_stationary


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


def build_paged_context(entries, pool, block_size: int, device):
    """Pack a step's sequences into one row and describe where their K/V live.

    Everything is assembled in Python lists and turned into a handful of tensors, so the
    cost per sequence stays a few microseconds.

    Args:
        entries: :class:`engine.scheduler.ScheduledSeq` items (sequence, new-token count).
        pool: the :class:`engine.kv_pool.KVPool`.
        block_size: tokens per block.
        device: the model's device.

    Returns:
        ``(input_ids [1, T], position_ids [1, T], keep [N], PagedContext)`` where ``keep`` holds
        the packed index of the last new token of each sequence that samples this step.
    """
    from .paged_attention import PagedContext, SeqSlice

    ids, pos, new_slots, keep, prefills = [], [], [], [], []
    decode_q, decode_tables, decode_lens = [], [], []
    q_start = 0
    for e in entries:
        seq, n = e.seq, e.num_new
        ctx = seq.num_computed
        total = ctx + n
        table = seq.block_table[:-(-total // block_size)]
        ids.extend(seq.all_ids[ctx:total])
        pos.extend(range(ctx, total))
        new_slots.extend(table[p // block_size] * block_size + p % block_size
                         for p in range(ctx, total))
        if n == 1:
            decode_q.append(q_start)
            decode_tables.append(table)
            decode_lens.append(total)
        else:
            blocks = torch.tensor(table, dtype=torch.long, device=device)
            prefills.append(SeqSlice(q_start, n, ctx, blocks))
        if e.samples:
            keep.append(q_start + n - 1)
        q_start += n
    dq = db = dm = dl = None
    smax = 0
    if decode_q:
        dq = torch.tensor(decode_q, dtype=torch.long, device=device)
        width = max(len(t) for t in decode_tables)
        db = torch.tensor([t + [0] * (width - len(t)) for t in decode_tables], dtype=torch.long,
                          device=device)
        dl = torch.tensor(decode_lens, dtype=torch.long, device=device)
        smax = max(decode_lens)
        if min(decode_lens) != smax:
            dm = (torch.arange(smax, device=device)[None, :] < dl[:, None])[:, None, None, :]
    ctx = PagedContext(pool=pool, new_slots=torch.tensor(new_slots, dtype=torch.long, device=device),
                       prefills=prefills, decode_q=dq, decode_blocks=db, decode_mask=dm,
                       decode_lens=dl, decode_max_len=smax)
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    position_ids = torch.tensor([pos], dtype=torch.long, device=device)
    return input_ids, position_ids, torch.tensor(keep, dtype=torch.long, device=device), ctx


class PagedModelRunner(ModelRunner):
    """Runs packed steps of many sequences over the paged KV pool (continuous batching).

    Decode-only steps of 2 or more sequences on CPU run their linear layers in the
    weight-stationary layout (:mod:`engine.weight_stationary`).

    Args:
        model: a transformers ``*ForCausalLM`` whose attention goes through transformers'
            attention interface (Llama, Qwen2, Mistral families).
        pool: the :class:`engine.kv_pool.KVPool`.
        block_size: tokens per block.
        weight_stationary: allow that layout (False keeps ``F.linear`` for every step).
    """

    def __init__(self, model, pool, block_size: int, weight_stationary: bool = True):
        super().__init__(model)
        from .paged_attention import register

        self.pool = pool
        self.block_size = block_size
        self.weight_stationary = weight_stationary
        model.set_attn_implementation(register())

    def run(self, entries) -> torch.Tensor:
        """One forward pass over every scheduled sequence.

        Returns:
            ``[N, V]`` logits: one row per sequence whose step ends at its last known token
            (in ``entries`` order), ``N`` may be 0 for a step of prefill chunks only.
        """
        input_ids, position_ids, keep, ctx = build_paged_context(
            entries, self.pool, self.block_size, self.device)
        if keep.numel() == 0:
            keep = torch.tensor([input_ids.shape[1] - 1], device=self.device)
            drop = True
        else:
            drop = False
        layout = contextlib.nullcontext()
        if self.weight_stationary and use_weight_stationary(self.device, input_ids.shape[1],
                                                            ctx.decode_only):
            layout = WeightStationaryLinear()
        with torch.inference_mode(), layout:
            out = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                             logits_to_keep=keep, paged=ctx)
        return out.logits[0, :0] if drop else out.logits[0]
