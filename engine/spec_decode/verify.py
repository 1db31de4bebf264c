"""The runner's side of speculative decoding: from a packed step's logits to accepted tokens.

A sequence with ``k`` drafts contributes ``k + 1`` rows of logits to the step (its last known
token and each draft, in order); the others one row each. :func:`verify_drafts` takes the rows
of the speculating sequences, verifies their drafts (:mod:`.rejection_sampler`) and hands the
remaining rows back for the ordinary sampler.
"""

from __future__ import annotations

import torch

from engine.errors import NonFiniteLogitsError
from engine.worker.kernels import row_summary
from engine.worker.runner_output import SampleResult
from engine.params import SamplingParams
from engine.spec_decode.rejection_sampler import greedy_verify, rejection_sample
from engine.worker.sampler import TOP_CANDIDATES, sample_result
from engine.worker.sampling_ops import min_p_rows, row_argmax, row_topk, top_k_top_p_rows


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """``[R, V]`` fp32 probabilities of one request's rows after its temperature, top-k, top-p
    and min-p (the sampler's rules; greedy requests get temperature 1, as the sampler shows).

    Args:
        logits: ``[R, V]`` logits of one request's verified positions (any float dtype; fp32
            is used as is).
    """
    x = logits.float()
    r = x.shape[0]
    if not params.greedy and params.temperature != 1.0:
        x = x / params.temperature
    x = top_k_top_p_rows(x, [params.top_k] * r, [params.top_p] * r)
    return min_p_rows(torch.softmax(x, dim=-1), [params.min_p] * r)


def verify_one(logits: torch.Tensor, draft_ids: list[int], params: SamplingParams,
               generator) -> list[SampleResult]:
    """Verify one request's drafts.

    Args:
        logits: ``[k + 1, V]`` logits at the last known token and each of the ``k`` drafts.
        draft_ids: the ``k`` drafts.
        params: the request's settings (no penalties: speculation is off for those).
        generator: its generator, or ``None``.

    Returns:
        ``a + 1`` results: the ``a`` accepted drafts, then the model's own token (the greedy
        argmax, or the rejection sampler's draw); each with its probability and top candidates
        at its position.

    Raises:
        NonFiniteLogitsError: the logits hold NaN or inf.
    """
    x = logits.float()
    # one summation per row finds NaN or inf (as the sampler does); only then count them
    if not bool(torch.isfinite(x.sum(dim=-1)).all()):
        bad = int((~torch.isfinite(x)).sum())
        if bad:
            raise NonFiniteLogitsError(f"model produced {bad} non-finite logits (NaN or inf)")
    probs = target_probs(x, params)
    k = min(TOP_CANDIDATES, probs.shape[-1])
    if params.greedy and row_summary.available(x):
        # every row's argmax, its probability and candidates in one pass (as the sampler)
        rows = row_summary.row_summary(x.contiguous(), probs.contiguous(),
                                       torch.full((x.shape[0],), -1, dtype=torch.long), k).tolist()
        a = greedy_verify([int(r[0]) for r in rows], draft_ids)
        return [sample_result(int(r[0]), r[1], r[3:3 + k], r[3 + k:]) for r in rows[:a + 1]]
    if params.greedy:
        argmax = row_argmax(x).tolist()     # torch.argmax's index, without its scalar loop
        a = greedy_verify(argmax, draft_ids)
        tokens = list(draft_ids[:a]) + [argmax[a]]
    else:
        a, last = rejection_sample(probs, draft_ids, None, generator)
        tokens = list(draft_ids[:a]) + [last]
    rows = probs[:a + 1]
    top_values, top_indices = row_topk(rows, k)      # the sampler's candidates, the same way
    chosen = rows.gather(1, torch.tensor(tokens, device=rows.device)[:, None])[:, 0]
    return [sample_result(tok, p, ids, ps) for tok, p, ids, ps in
            zip(tokens, chosen.tolist(), top_indices.tolist(), top_values.tolist())]


def verify_drafts(entries, logits: torch.Tensor, out) -> torch.Tensor:
    """Verify the drafts of a packed step and return the rows left for the plain sampler.

    Args:
        entries: the step's sampling :class:`engine.core.scheduler_output.ScheduledSeq`
            entries, in packed order; an entry with ``draft_ids`` owns ``k + 1`` rows.
        logits: ``[sum of rows, V]`` the forward pass's kept logits.
        out: the step's :class:`engine.worker.runner_output.ModelRunnerOutput`: each speculating request
            gets ``sampled`` (the model's own token) and ``spec_accepted`` (the accepted
            drafts), or an entry in ``errors``.

    Returns:
        ``[N, V]`` the rows of the entries without drafts, in order.
    """
    plain, r = [], 0
    for e in entries:
        k = len(e.draft_ids)
        if not k:
            plain.append(r)
            r += 1
            continue
        sid = e.seq.seq_id
        try:
            res = verify_one(logits[r:r + k + 1], e.draft_ids, e.seq.params, e.seq.generator)
        except (RuntimeError, ValueError) as exc:
            out.errors[sid] = exc
        else:
            out.spec_accepted[sid] = res[:-1]
            out.sampled[sid] = res[-1]
        r += k + 1
    if r != logits.shape[0]:
        raise RuntimeError(f"speculative step expected {r} logit rows, got {logits.shape[0]}")
    return logits[plain]
