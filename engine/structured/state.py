"""One sequence's structured-output state: its grammar matcher and its counts."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.structured.params import StructuredOutputError


@dataclass
class StructuredState:
    """The matcher of one sequence (kept on its ``Sequence.structured``) and what it did.

    The matcher follows the sequence's output lazily: :meth:`sync` feeds it the output
    tokens it has not seen, so every path that appends tokens (plain steps, forks of samples
    and beams, preemption and recompute) needs no hook of its own.

    Attributes:
        matcher: the ``llguidance.LLMatcher`` (``None`` once :meth:`close` freed it).
        kind: the structure's kind (``"json"``, ``"regex"``, ...).
        eos_token_id: the token a complete structure ends with.
        jump_forward: append the tokens the grammar forces without a forward pass each
            (the paged runner, one-sequence requests); otherwise they are only marked.
        consumed: output tokens the matcher has consumed.
        forced: output positions (0-based) whose token the grammar forced (one allowed token).
        jumped: of those, the positions appended without a forward pass of their own.
        allowed: per output position, how many tokens the mask allowed (``None`` for jumped
            tokens), for the page's chips.
        pending: forced tokens computed after this step's sampled token, for the scheduler
            to append (then cleared).
        mask_s: seconds spent filling this sequence's masks.
        explain: record :attr:`removed` at each masked step (``structured_outputs.explain``).
        vocab_size: width of the masks (the logits' vocabulary), once one was filled.
        removed: per output position, ``(mass, [(token_id, prob), ...])``: the probability
            the mask removed (softmax of the raw logits) and the most likely removed tokens.
    """

    matcher: object
    kind: str
    eos_token_id: int
    jump_forward: bool = False
    consumed: int = 0
    forced: set[int] = field(default_factory=set)
    jumped: set[int] = field(default_factory=set)
    allowed: dict[int, int] = field(default_factory=dict)
    pending: list[int] = field(default_factory=list)
    mask_s: float = 0.0
    explain: bool = False
    vocab_size: int = 0
    removed: dict[int, tuple] = field(default_factory=dict)

    def fork(self) -> "StructuredState":
        """A copy for a forked sample or beam: its own matcher at the same point."""
        return StructuredState(self.matcher.deep_copy(), self.kind, self.eos_token_id,
                               False, self.consumed, set(self.forced), set(self.jumped),
                               dict(self.allowed), explain=self.explain,
                               vocab_size=self.vocab_size, removed=dict(self.removed))

    def sync(self, output_ids: list[int]) -> None:
        """Feed the matcher the output tokens it has not consumed yet.

        Raises:
            StructuredOutputError: a token the grammar rejects (it should never get one: the
                mask allowed it), naming ``structured_outputs``.
        """
        new = output_ids[self.consumed:]
        if new:
            if not self.matcher.consume_tokens(new):
                raise StructuredOutputError("structured_outputs", "the output left the grammar: "
                                            + self.matcher.get_error()[:200])
            self.consumed = len(output_ids)

    def advance(self, token_id: int, room: int) -> None:
        """After the runner sampled ``token_id`` at output position ``consumed``: consume it
        and queue the tokens the grammar then forces (at most ``room``), ending with EOS when
        they complete the structure, in :attr:`pending` (only with :attr:`jump_forward`)."""
        self.pending = []
        if not self.matcher.consume_token(token_id):
            return  # the next sync raises
        self.consumed += 1
        if room <= 0 or token_id == self.eos_token_id:
            return
        forced = [] if self.matcher.is_stopped() else list(self.matcher.compute_ff_tokens())[:room]
        if forced:
            if not self.matcher.consume_tokens(forced):
                return
            self.consumed += len(forced)
        self.pending = forced
        if len(forced) < room and self.matcher.is_stopped():
            self.pending.append(self.eos_token_id)  # the grammar allows only EOS now

    def take_pending(self, start: int) -> list[int]:
        """The forced tokens for the scheduler to append at output positions from ``start``,
        marked as forced and jumped; clears :attr:`pending`."""
        tokens, self.pending = self.pending, []
        for i in range(start, start + len(tokens)):
            self.forced.add(i)
            self.jumped.add(i)
        return tokens

    def summary(self) -> dict:
        """The request's structured-output figures: ``{"kind", "forced_tokens",
        "jump_forward_tokens", "mask_s"}`` (forced tokens include the jumped ones)."""
        return {"kind": self.kind, "forced_tokens": len(self.forced),
                "jump_forward_tokens": len(self.jumped), "mask_s": self.mask_s}

    def close(self) -> None:
        """Free the matcher (the request finished, failed or was aborted); counts stay."""
        self.matcher = None
        self.pending = []
