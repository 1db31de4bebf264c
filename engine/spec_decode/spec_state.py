"""One request's speculative decoding: its drafter, its counts, and when drafting pauses."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.spec_decode.config import SpeculativeConfig
from engine.spec_decode.ngram_proposer import NgramProposer


@dataclass
class SpecState:
    """Drafting state and counts of one request (kept on its ``Sequence``).

    Counts (tokens unless named otherwise):
        drafted: draft tokens sent to verification.
        accepted: draft tokens the model accepted.
        verify_steps: forward passes that verified drafts.
        decode_passes: forward passes that produced output tokens after the first token
            (verification passes and plain one-token decode passes).
        decode_tokens: output tokens those passes produced.
        paused_steps: decode steps that skipped drafting because acceptance was low.
        accepted_per_step: accepted drafts of each verification step, in order.

    Attributes:
        config: the request's :class:`SpeculativeConfig`.
        off_reason: why the request never drafts (e.g. penalties need one token per pass),
            or ``""``.
        drafter: for ``method="draft"``, the request's
            :class:`engine.spec_decode.draft_proposer.RequestDrafter` (anything with
            ``propose(token_ids, k) -> list[int]``); ``None`` builds the n-gram proposer.
    """

    config: SpeculativeConfig
    off_reason: str = ""
    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0
    decode_passes: int = 0
    decode_tokens: int = 0
    paused_steps: int = 0
    accepted_per_step: list[int] = field(default_factory=list)
    _recent: deque = field(default_factory=deque)
    _pause_left: int = 0
    _backoff: int = 0
    drafter: object = None

    def __post_init__(self) -> None:
        c = self.config
        if self.drafter is None:
            if c.method == "draft":
                raise ValueError("speculative='draft' needs a drafter (the engine's draft_model)")
            self.drafter = NgramProposer(c.prompt_lookup_min, c.prompt_lookup_max)
        self._recent = deque(maxlen=c.window)

    # ---- drafting --------------------------------------------------------------------------
    def propose(self, token_ids: list[int], max_k: int) -> list[int]:
        """Draft tokens for the next step, or ``[]`` while paused, off, or with no match.

        Args:
            token_ids: the sequence so far (prompt then output).
            max_k: most tokens the step may verify beyond the one known token (token budget,
                ``max_tokens`` and context left), capped here at ``num_speculative_tokens``.
        """
        if self.off_reason:
            return []
        if self._pause_left > 0:
            self._pause_left -= 1
            self.paused_steps += 1
            return []
        k = min(self.config.num_speculative_tokens, max_k)
        drafts = self.drafter.propose(token_ids, k) if k > 0 else []
        if getattr(self.drafter, "error", ""):
            self.off_reason = self.drafter.error
        return drafts

    @property
    def paused(self) -> bool:
        """Drafting pauses now because the recent acceptance rate was low."""
        return self._pause_left > 0

    # ---- results ---------------------------------------------------------------------------
    def record(self, drafted: int, accepted: int, tokens: int) -> None:
        """Count one decode pass.

        Args:
            drafted: draft tokens it verified (0 for a plain decode pass).
            accepted: drafts accepted.
            tokens: output tokens the pass produced (accepted drafts plus the model's own, cut
                short when a stop token ended the request).
        """
        self.decode_passes += 1
        self.decode_tokens += tokens
        if not drafted:
            return
        self.drafted += drafted
        self.accepted += accepted
        self.verify_steps += 1
        self.accepted_per_step.append(accepted)
        self._recent.append((drafted, accepted))
        if len(self._recent) == self._recent.maxlen:
            d = sum(x for x, _ in self._recent)
            a = sum(y for _, y in self._recent)
            if a < self.config.min_acceptance * d:
                self._backoff = (min(self._backoff * 2, self.config.max_backoff_steps)
                                 if self._backoff else self.config.backoff_steps)
                self._pause_left = self._backoff
                self._recent.clear()
            else:
                self._backoff = 0

    def summary(self) -> dict:
        """The request's figures, JSON-ready.

        Returns:
            ``{"method", "num_speculative_tokens", "drafted", "accepted", "acceptance_rate"
            (accepted / drafted, 0 when none), "verify_steps", "mean_accepted_length"
            (accepted / verify_steps), "decode_passes", "tokens_per_step" (decode tokens /
            decode passes, 1.0 without speculation), "paused_steps", "off_reason"}``.
        """
        return {
            "method": self.config.method,
            "num_speculative_tokens": self.config.num_speculative_tokens,
            "drafted": self.drafted, "accepted": self.accepted,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "verify_steps": self.verify_steps,
            "mean_accepted_length": (self.accepted / self.verify_steps
                                     if self.verify_steps else 0.0),
            "decode_passes": self.decode_passes,
            "tokens_per_step": (self.decode_tokens / self.decode_passes
                                if self.decode_passes else 1.0),
            "paused_steps": self.paused_steps, "off_reason": self.off_reason,
        }


def spec_state_for(config, params, speculative, num_speculative_tokens,
                   paged: bool, draft_proposer=None, request_id: str = "") -> SpecState | None:
    """The :class:`SpecState` of a new request, or ``None`` when it decodes plainly.

    Args:
        config: the engine's :class:`engine.config.EngineConfig` (its defaults).
        params: the request's :class:`engine.params.SamplingParams`.
        speculative: the request's choice: a method name, ``False``/``"off"``, or ``None``
            for ``config.speculative``.
        num_speculative_tokens: the request's ``k``, or ``None`` for the engine's.
        paged: the request runs on the paged KV cache (speculation needs it).
        draft_proposer: the engine's
            :class:`engine.spec_decode.draft_proposer.DraftModelProposer`, or ``None`` when it
            has no ``draft_model``.
        request_id: the request's id (the key of its draft cache).

    Raises:
        ValueError: an unknown method, a ``k`` out of range, or ``"draft"`` on an engine
            without ``draft_model``; the message names the field.
    """
    method = config.speculative if speculative is None else speculative
    if method in (False, "off", "", None):
        return None
    if method is True:
        method = "ngram"
    k = config.num_speculative_tokens if num_speculative_tokens is None \
        else num_speculative_tokens
    spec_config = SpeculativeConfig(method, k)
    drafter = None
    if method == "draft":
        if draft_proposer is None:
            raise ValueError("speculative='draft' needs the engine's draft_model (a Hub id or "
                             "a local folder, EngineConfig.draft_model / --draft-model)")
        drafter = draft_proposer.for_request(request_id)
    state = SpecState(spec_config, drafter=drafter)
    if not paged:
        state.off_reason = "needs the paged KV cache"
    elif (params.repetition_penalty != 1.0 or params.presence_penalty
          or params.frequency_penalty):
        state.off_reason = "penalties change with every token, so each needs its own pass"
    return state
