"""A request's way in: check the caller's prompt and settings and build its first sequence.

:class:`InputProcessor` (vLLM v1's name) runs on the caller's thread, before the engine's lock
is taken: it refuses what cannot run (with a message naming the field), tokenizes the prompt,
compiles a structure's grammar and sets up speculative decoding, so the engine thread only
ever queues ready :class:`engine.core.sequence.Sequence` objects.
"""

from __future__ import annotations

import itertools

import torch

from engine.core.sequence import SOURCES, Sequence
from engine.core.sequence_group import new_group
from engine.model.prompt import check_fits, encode_prompt
from engine.model.prompt_bytes import check_prompt_bytes, check_prompt_prefix
from engine.params import SamplingParams, sample_seed
from engine.spec_decode.spec_state import spec_state_for


class InputProcessor:
    """Turns :meth:`engine.engine.LLMEngine.submit`'s arguments into a sequence to queue.

    Args:
        tokenizer: the model's tokenizer.
        longest_token_bytes: UTF-8 bytes of the vocabulary's longest token (``None`` when the
            tokenizer lists none; :mod:`engine.model.prompt_bytes`).
        context_len: ``() -> int``, the context window in tokens, read at each request (the
            engine's current ``info.context_len``: ``ModelInfo`` is frozen, so a caller that
            changes the window replaces the engine's ``info``).
        config: the engine's :class:`engine.config.EngineConfig` (speculative defaults).
        paged: the engine runs the paged KV cache (batching on).
        block_manager: the engine's block manager (its pool caps a sequence's length).
        scheduler: the engine's scheduler (``max_num_seqs`` and EOS ids for a group).
        structured: the engine's :class:`engine.structured.engine_part.StructuredOutputs`.
        drafter: the draft model of ``speculative="draft"``, or ``None``.
        device: where seeded ``torch.Generator`` objects live (the runner's device).
    """

    def __init__(self, *, tokenizer, longest_token_bytes: int | None, context_len, config,
                 paged: bool, block_manager, scheduler, structured, drafter, device):
        self.tokenizer, self.longest_token_bytes = tokenizer, longest_token_bytes
        self.context_len, self.config, self.paged = context_len, config, paged
        self.block_manager, self.scheduler = block_manager, scheduler
        self.structured, self.drafter, self.device = structured, drafter, device
        self._ids = itertools.count()

    @property
    def max_seq_tokens(self) -> int:
        """Longest sequence (prompt + output) one request may reach, in tokens: the context
        window, or the paged KV pool's tokens when fewer."""
        ctx = self.context_len()
        if self.paged:
            ctx = min(ctx, len(self.block_manager.blocks) * self.block_manager.block_size)
        return ctx

    def process_inputs(self, prompt, params: SamplingParams | None, *, raw: bool,
                       use_kv_cache: bool, request_id: str | None, cache_salt: str | None,
                       source: str, speculative, num_speculative_tokens: int | None) -> Sequence:
        """The first sequence of a new request, checked, with its structure attached.

        Arguments as :meth:`engine.engine.LLMEngine.submit`'s (``request_id``: ``None`` makes
        one, ``"req-<n>"``).

        Returns:
            A :class:`Sequence` ready to queue (for several samples or beams, the group's first,
            :func:`engine.core.sequence_group.new_group`).

        Raises:
            ValueError: a malformed argument or a prompt that does not fit, as documented on
                ``submit``; ``StructuredOutputError`` for a structure that does not compile.
        """
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError("params must be a SamplingParams")
        if cache_salt is not None and not isinstance(cache_salt, str):
            raise ValueError(f"cache_salt must be a string, got {type(cache_salt).__name__}")
        if source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
        ctx = self.max_seq_tokens
        what = "the context window" if ctx == self.context_len() else "the KV cache pool"
        check_prompt_bytes(prompt, ctx, self.longest_token_bytes, what)  # before tokenizing
        check_prompt_prefix(self.tokenizer, prompt, ctx, what)  # a long one by its beginning
        prompt_ids = encode_prompt(self.tokenizer, prompt, raw=raw)
        check_fits(len(prompt_ids), params.max_tokens, ctx, what)
        rid = request_id or f"req-{next(self._ids)}"
        # the grammar compiles here, on the caller's thread, not between the engine's steps
        structured = self.structured.state_for(params, self.paged and use_kv_cache)
        if params.group_width > 1 or params.use_beam_search:
            if speculative not in (None, False, "off"):
                raise ValueError("speculative decoding works on one-sequence requests: use it "
                                 "without n, best_of or num_beams above 1")
            seq = self._new_group(rid, prompt_ids, params, use_kv_cache, ctx, cache_salt, source)
        else:
            gen = None
            if params.seed is not None:
                gen = torch.Generator(device=self.device).manual_seed(params.seed)
            spec = spec_state_for(self.config, params, speculative, num_speculative_tokens,
                                  self.paged and use_kv_cache, self.drafter, rid)
            seq = Sequence(seq_id=rid, prompt_ids=prompt_ids, params=params,
                           use_kv_cache=use_kv_cache, context_len=ctx, generator=gen,
                           cache_salt=cache_salt, source=source, spec=spec)
        self.structured.attach(seq, structured)
        return seq

    def _new_group(self, rid: str, prompt_ids: list[int], params: SamplingParams,
                   use_kv_cache: bool, ctx: int, cache_salt: str | None,
                   source: str = "user") -> Sequence:
        """The first sequence of a request with several samples or beams.

        Raises:
            ValueError: without the paged KV cache, wider than ``max_num_seqs``, or when its
                sequences, unshared, could not all fit the pool at full length.
        """
        if not (self.paged and use_kv_cache):
            raise ValueError("n, best_of and num_beams above 1 need the paged KV cache "
                             "(batching on, use_kv_cache on)")
        what = "num_beams" if params.use_beam_search else "best_of"
        if params.group_width > self.scheduler.max_num_seqs:
            raise ValueError(f"{what} must be at most max_num_seqs "
                             f"({self.scheduler.max_num_seqs}), got {params.group_width}")
        bm = self.block_manager
        longest = len(prompt_ids) + (params.max_tokens or ctx - len(prompt_ids))
        if params.group_width * bm.blocks_needed(min(longest, ctx)) > len(bm.blocks):
            # after a preemption every sequence is recomputed on its own blocks: all must fit
            raise ValueError(
                f"{what} = {params.group_width} sequences of up to {min(longest, ctx)} tokens "
                f"do not fit the KV cache pool ({len(bm.blocks) * bm.block_size} tokens); "
                f"lower it or max_tokens")
        gens = [None] * params.group_width
        if params.seed is not None:
            gens = [torch.Generator(device=self.device).manual_seed(sample_seed(params.seed, k))
                    for k in range(params.group_width)]
        return new_group(rid, prompt_ids, params, gens, self.scheduler.eos_token_ids, ctx,
                         use_kv_cache=use_kv_cache, cache_salt=cache_salt, source=source)
