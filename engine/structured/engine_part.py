"""The engine's structured-output part: one grammar compiler per engine, one matcher per
sequence, attached at submit and freed when the sequence ends."""

from __future__ import annotations

from engine.structured.compiler import GrammarCompiler
from engine.structured.state import StructuredState

SPEC_OFF_REASON = "structured output: each token needs its grammar's mask, so drafting is off"


class StructuredOutputs:
    """Builds each structured request's :class:`StructuredState` and frees it.

    Args:
        tokenizer: the model's Hugging Face tokenizer.
        model_config: the model's config (its ``vocab_size`` is the logits' width).

    Attributes:
        compiler: the engine's :class:`GrammarCompiler` (its cache and counts).
        jump_forward: append forced tokens without a forward pass where the runner allows
            it (True); False only marks them (the bench compares the two).
    """

    def __init__(self, tokenizer, model_config):
        vocab = int(getattr(model_config, "vocab_size", 0) or len(tokenizer))
        self.compiler = GrammarCompiler(tokenizer, vocab)
        self.jump_forward = True

    def state_for(self, params, paged: bool) -> StructuredState | None:
        """The state of a new request's first sequence, or ``None`` without a structure.

        Compiles the grammar (cached by structure) on the calling thread.

        Args:
            params: the request's :class:`engine.params.SamplingParams`.
            paged: it runs on the paged runner with a KV cache (jump-forward needs it).

        Raises:
            StructuredOutputError: the structure does not compile (names the field).
        """
        so = params.structured_outputs
        if so is None:
            return None
        matcher = self.compiler.matcher_for(so)
        one_sequence = params.group_width == 1 and not params.use_beam_search
        return StructuredState(matcher, so.kind, self.compiler.eos_token_id,
                               jump_forward=self.jump_forward and paged and one_sequence,
                               explain=so.explain)

    @staticmethod
    def attach(seq, state: StructuredState | None) -> None:
        """Give ``seq`` its state; a speculative request stops drafting (with the reason in
        its speculative summary): drafts are not checked against the grammar."""
        if state is None:
            return
        seq.structured = state
        if seq.spec is not None and not seq.spec.off_reason:
            seq.spec.off_reason = SPEC_OFF_REASON

    @staticmethod
    def release(seqs) -> None:
        """Free the matchers of sequences that finished, failed or were aborted."""
        for seq in seqs:
            if seq.structured is not None:
                seq.structured.close()
