"""The runner's part for requests with several samples or beams: what their logits give.

- The prompt's sequence of a sampled group, before it forks: ``best_of`` draws from its one
  logits row, draw ``k`` with sample ``k``'s generator (the usual sampler, the row repeated), so
  sample ``k`` equals a one-sequence request seeded with sample ``k``'s seed.
- A beam: its best next tokens by ``log_softmax`` of the raw logits in fp32 (what Hugging Face's
  beam search ranks by), as many as its group's :class:`engine.core.beam_search.BeamSearch`
  asks for.

The results go into the step's :class:`engine.worker.runner_output.ModelRunnerOutput`; the scheduler's
bookkeeping forks and ranks.
"""

from __future__ import annotations

import torch

from engine.errors import NonFiniteLogitsError


def split_group_rows(seqs) -> tuple[list[int], list[int]]:
    """Row indices of ``seqs`` (the sequences sampling this step, in logits order): those the
    usual sampler draws for, and those handed to :func:`sample_group_rows`."""
    own = [i for i, s in enumerate(seqs) if s.group is not None and s.group.draws_itself(s)]
    mine = set(own)
    return [i for i in range(len(seqs)) if i not in mine], own


def sample_group_rows(sampler, logits: torch.Tensor, seqs, out) -> None:
    """Fill ``out.group_samples`` and ``out.beam_candidates`` for ``seqs``.

    Args:
        sampler: the runner's :class:`engine.worker.sampler.Sampler`.
        logits: ``[R, V]`` logits, one row per sequence of ``seqs``.
        seqs: sequences whose group takes their logits (:func:`split_group_rows`).
        out: the step's :class:`engine.worker.runner_output.ModelRunnerOutput`; a row with NaN or inf
            logits gets an error instead (its request fails, the others go on).
    """
    beams = [i for i, s in enumerate(seqs) if s.group.beam is not None]
    if beams:
        x = logits[beams].float()
        finite = torch.isfinite(x).all(dim=-1).tolist()
        logp = torch.log_softmax(x, dim=-1)
        k = min(max(seqs[i].group.beam.candidates_per_beam for i in beams), x.shape[-1])
        top = torch.topk(logp, k, dim=-1)
        ids, vals = top.indices.tolist(), top.values.tolist()
        for j, i in enumerate(beams):
            sid = seqs[i].seq_id
            if not finite[j]:
                out.errors[sid] = NonFiniteLogitsError("model produced non-finite logits (NaN or inf)")
            else:
                out.beam_candidates[sid] = (ids[j], vals[j])
    for i, seq in enumerate(seqs):
        g = seq.group
        if g.beam is not None:
            continue
        width = g.width
        draws = sampler.sample_many(logits[i:i + 1].expand(width, -1), [seq.params] * width,
                                    g.generators[:width] or [None] * width,
                                    lambda _: (seq.all_ids, seq.output_ids))
        bad = next((d for d in draws if isinstance(d, Exception)), None)
        if bad is not None:
            out.errors[seq.seq_id] = bad
        else:
            out.group_samples[seq.seq_id] = draws
