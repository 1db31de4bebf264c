"""Beam search's selection rule, step by step, as Hugging Face ``generate`` does it.

Each step every running beam proposes its best next tokens; the candidates are ranked by the
beam's running score plus the token's log-softmax (all in fp32, as transformers adds them);
the best ``K = max(2, 1 + number of EOS ids) × num_beams`` are kept. Among the first
``num_beams`` of them, those that end (an EOS token, or ``max_tokens`` reached) become finished
*hypotheses*, ranked by ``score / L ** length_penalty`` where ``L`` is the number of generated
tokens including the last one (transformers 5, ``GenerationMixin._update_finished_beams``); the
best ``num_beams`` that do not end are the next running beams. The search stops when the
``num_beams`` best hypotheses can no longer change (``_check_early_stop_heuristic``):

- ``early_stopping=True``: as soon as ``num_beams`` hypotheses have finished;
- ``False``: also when the best running beam, scored at its current length, is no better than
  the worst finished hypothesis;
- ``"never"``: the same check, but with ``length_penalty > 0`` the running beam is scored at
  the longest length it could reach (``max_tokens``).

This file only ranks; the scheduler forks, frees and copies blocks
(:mod:`engine.core.sequence_group`). No torch here: fp32 arithmetic comes from numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NEG = np.float32(-1.0e9)  # transformers' score for an impossible beam


@dataclass
class Hypothesis:
    """A finished beam.

    Attributes:
        token_ids: its generated ids (the EOS that ended it included).
        logprob: fp32 sum of its tokens' log-softmax values.
        score: ``logprob / len(token_ids) ** length_penalty``, the rank among hypotheses.
        reason: ``"stop"`` (EOS) or ``"length"`` (``max_tokens``).
    """

    token_ids: list[int]
    logprob: float
    score: float
    reason: str


@dataclass
class Continuation:
    """One of the next running beams: ``parent`` (index into the step's beams) plus ``token``."""

    parent: int
    token: int
    logprob: float


@dataclass
class BeamStep:
    """What one step decided.

    Attributes:
        running: the next running beams, best first (empty when the search is done).
        finished: hypotheses added this step.
        done: the search has ended; the answer is :attr:`BeamSearch.finished`.
    """

    running: list[Continuation] = field(default_factory=list)
    finished: list[Hypothesis] = field(default_factory=list)
    done: bool = False


class BeamSearch:
    """The ranking state of one request's beam search.

    Args:
        num_beams: beam width (``k``).
        length_penalty: exponent of the generated length in a hypothesis's score.
        early_stopping: ``True``, ``False`` or ``"never"`` (module docstring).
        max_tokens: most generated tokens per beam.
        eos_ids: token ids that end a beam (an empty set with ``ignore_eos``).
        num_eos: EOS ids counted for ``K`` (transformers counts the ids it was given).
    """

    def __init__(self, num_beams: int, length_penalty: float, early_stopping, max_tokens: int,
                 eos_ids, num_eos: int | None = None):
        self.num_beams = num_beams
        self.length_penalty = float(length_penalty)
        self.early_stopping = early_stopping
        self.max_tokens = max_tokens
        self.eos_ids = frozenset(eos_ids)
        n_eos = len(self.eos_ids) if num_eos is None else num_eos
        self.keep = max(2, 1 + n_eos) * num_beams
        self.finished: list[Hypothesis] = []
        self.improvable = True  # transformers' is_early_stop_heuristic_unsatisfied
        self.done = False

    @property
    def candidates_per_beam(self) -> int:
        """How many next tokens each beam must propose: enough for the global top ``K``."""
        return self.keep

    def _penalized(self, logprob: np.float32, length: int) -> np.float32:
        return np.float32(logprob / np.float32(float(length) ** self.length_penalty))

    def step(self, beams: list[tuple[list[int], float]],
             candidates: list[tuple[list[int], list[float]]]) -> BeamStep:
        """Rank one step.

        Args:
            beams: each running beam's ``(generated ids, running logprob)``; all have the same
                number of generated ids.
            candidates: per beam, its best next ``(token ids, log-softmax values)``, best first
                (at least :attr:`candidates_per_beam` of them, or the whole vocabulary).

        Returns:
            A :class:`BeamStep`.
        """
        gen = len(beams[0][0])
        scored = []
        for b, ((_, running), (ids, lps)) in enumerate(zip(beams, candidates)):
            base = np.float32(running)
            for rank, (t, lp) in enumerate(zip(ids, lps)):
                scored.append((np.float32(base + np.float32(lp)), b, rank, t))
        # best first; ties go to the lower beam, then the better-ranked token of that beam
        scored.sort(key=lambda c: (-float(c[0]), c[1], c[2]))
        top = scored[:self.keep]
        at_length = gen + 1 >= self.max_tokens
        ends = [at_length or t in self.eos_ids for _, _, _, t in top]
        out = BeamStep()
        out.running = [Continuation(b, t, float(s)) for (s, b, _, t), e in zip(top, ends)
                       if not e][:self.num_beams]
        full = len(self.finished) >= self.num_beams
        closed = (full and self.early_stopping is True) or not self.improvable
        if not closed:
            for (s, b, _, t), e in list(zip(top, ends))[:self.num_beams]:
                if e:
                    hyp = Hypothesis(beams[b][0] + [t], float(s), float(self._penalized(s, gen + 1)),
                                     "length" if t not in self.eos_ids else "stop")
                    out.finished.append(hyp)
            merged = sorted(self.finished + out.finished, key=lambda h: -h.score)
            self.finished = merged[:self.num_beams]
        # the stopping rule, evaluated at the new length
        new_len = gen + 1
        if self.early_stopping == "never" and self.length_penalty > 0.0:
            best_len = self.max_tokens
        else:
            best_len = new_len
        best_running = np.float32(out.running[0].logprob) if out.running else NEG
        best_possible = self._penalized(best_running, best_len)
        if len(self.finished) >= self.num_beams:
            worst = min(np.float32(h.score) for h in self.finished)
            self.improvable = self.improvable and bool(best_possible > worst)
        all_full = len(self.finished) >= self.num_beams and self.early_stopping is True
        self.done = not self.improvable or all_full or all(ends) or not out.running
        if self.done:
            out.running = []
        out.done = self.done
        return out

    def best(self, n: int) -> list[Hypothesis]:
        """The ``n`` best finished hypotheses, best first."""
        return self.finished[:n]
