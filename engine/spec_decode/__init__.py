"""Speculative decoding: a cheap drafter proposes tokens, the model verifies them in one pass.

Decode at batch 1 is memory-bound: a forward pass over a few tokens reads the same weights as a
pass over one, at nearly the same cost. A drafter proposes ``k`` tokens; one forward pass of the
target model scores the last known token and the ``k`` drafts (the paged path of a prefill
chunk); the longest acceptable prefix of the drafts is kept, plus one token of the model's own.

- :mod:`.config`: :class:`SpeculativeConfig`, the options (no torch).
- :mod:`.ngram_proposer`: prompt lookup, the n-gram drafter (no torch).
- :mod:`.draft_proposer`: greedy drafts of a draft model, one transformers cache per request
  (outside the paged KV pool); :mod:`.draft_loader` loads it and checks its tokenizer.
- :mod:`.spec_state`: one request's counts and its acceptance-driven switch (no torch).
- :mod:`.rejection_sampler`: greedy verification and the rejection-sampling rule.
- :mod:`.verify`: the runner's side, from a step's logits to accepted tokens.
"""

from engine.spec_decode.config import SPECULATIVE_METHODS, SpeculativeConfig

__all__ = ["SPECULATIVE_METHODS", "SpeculativeConfig"]
