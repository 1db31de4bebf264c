"""The sampler: from each sequence's last-position logits to its next token, in fp32.

Order of operations (as in Hugging Face's logits processors, so settings compare):
repetition penalty -> presence/frequency penalty -> temperature -> top-k -> top-p -> min-p ->
softmax -> argmax (temperature 0) or a draw from the request's own ``torch.Generator``.

:meth:`Sampler.sample_many` does this for every row of a step at once on ``[N, V]``, with the
per-row settings as tensors, and reads the results back in one transfer: on a GPU the host
waits for the device once per step, whatever the mix of settings. :func:`apply_penalties` and
:func:`apply_filters` are the same rules for one row, the reference the tests hold it to.
"""

from __future__ import annotations

from typing import Callable

import torch

from engine.errors import NonFiniteLogitsError
from engine.params import SAMPLING_EPS, SamplingParams
from engine.worker.kernels import row_summary
from engine.worker.runner_output import SampleResult
from engine.worker.sampling_ops import (count_ids, min_p_rows, padded_ids, row_argmax, row_topk,
                                        top_k_top_p_rows)

TOP_CANDIDATES = 5


def apply_penalties(logits: torch.Tensor, params: SamplingParams, context_ids: torch.Tensor,
                    output_ids: torch.Tensor, exempt: torch.Tensor | None = None) -> torch.Tensor:
    """Penalise tokens already seen.

    Args:
        logits: ``[V]`` fp32 logits (not modified).
        params: the request's settings.
        context_ids: ``[N]`` int64 ids of the prompt and the output so far (repetition penalty;
            prompt tokens count, as in Hugging Face's ``RepetitionPenaltyLogitsProcessor``).
        output_ids: ``[M]`` int64 ids generated so far (presence and frequency penalties).
        exempt: ``[V]`` bool, True for ids never penalised: EOS and stop tokens and the chat
            template's special tokens (penalising ``<|im_end|>``, present in every earlier turn,
            would keep a reply from ending). The request's ``stop_token_ids`` are added here.

    Returns:
        ``[V]`` fp32 logits. Repetition penalty (CTRL, Keskar et al. 2019; Hugging Face rule):
        for each seen token a positive logit is divided by the penalty, a negative one
        multiplied. Presence penalty subtracts ``presence_penalty`` once per seen output token;
        frequency penalty subtracts ``frequency_penalty`` × its count (OpenAI/vLLM definition).
    """
    out = logits
    if params.stop_token_ids:
        extra = torch.zeros(out.shape[-1], dtype=torch.bool, device=out.device)
        extra[[i for i in params.stop_token_ids if i < out.shape[-1]]] = True
        exempt = extra if exempt is None else exempt | extra
    if params.repetition_penalty != 1.0 and context_ids.numel():
        ids = torch.unique(context_ids)
        if exempt is not None:
            ids = ids[~exempt[ids]]
        seen = out[ids]
        seen = torch.where(seen > 0, seen / params.repetition_penalty, seen * params.repetition_penalty)
        out = out.clone()
        out[ids] = seen
    if (params.presence_penalty or params.frequency_penalty) and output_ids.numel():
        counts = torch.bincount(output_ids, minlength=out.shape[-1]).to(out.dtype)
        if exempt is not None:
            counts = counts.masked_fill(exempt, 0)
        out = out - params.frequency_penalty * counts - params.presence_penalty * (counts > 0).to(out.dtype)
    return out


def apply_filters(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
                  min_p: float) -> torch.Tensor:
    """Temperature, top-k, top-p (nucleus) and min-p, returning probabilities.

    Args:
        logits: ``[V]`` fp32 logits (after penalties).
        temperature: at least :data:`engine.params.SAMPLING_EPS` divides the logits; below it
            (greedy) it is treated as 1 here (the greedy pick is the argmax either way, and the
            shown probabilities are those at temperature 1).
        top_k: keep the ``top_k`` largest; ``<= 0`` or ``>= V`` keeps all.
        top_p: keep the smallest most-likely set whose mass reaches ``top_p``; the top token
            always survives (Holtzman et al., 2020).
        min_p: drop tokens with probability below ``min_p`` × the top probability
            (Nguyen et al., 2024).

    Returns:
        ``[V]`` fp32 probabilities summing to 1; filtered tokens have probability 0.
    """
    x = logits.float()
    if temperature >= SAMPLING_EPS:
        x = x / temperature
    vocab = x.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(x, top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True, stable=True)  # ties in index order
        probs_sorted = torch.softmax(sorted_x, dim=-1)
        mass_before = torch.cumsum(probs_sorted, dim=-1) - probs_sorted
        drop_sorted = mass_before >= top_p
        drop_sorted[0] = False
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if min_p > 0:
        probs = probs.masked_fill(probs < min_p * probs.max(), 0.0)
        probs = probs / probs.sum()
    return probs


class Sampler:
    """Picks the next token of each sequence from its last-position logits.

    Args:
        exempt_ids: token ids the penalties never touch (the model's EOS set and the
            tokenizer's special tokens; see :func:`apply_penalties`).
    """

    def __init__(self, exempt_ids=()):
        self.exempt_ids = sorted({int(i) for i in exempt_ids})
        self._exempt: torch.Tensor | None = None

    def _exempt_mask(self, vocab: int, device) -> torch.Tensor | None:
        """``[vocab]`` bool mask of :attr:`exempt_ids` on ``device`` (built once, then reused)."""
        if not self.exempt_ids:
            return None
        m = self._exempt
        if m is None or m.shape[0] != vocab or m.device != torch.device(device):
            m = torch.zeros(vocab, dtype=torch.bool, device=device)
            m[[i for i in self.exempt_ids if i < vocab]] = True
            self._exempt = m
        return m

    def sample(self, logits: torch.Tensor, params: SamplingParams, context_ids,
               output_ids, generator: torch.Generator | None) -> SampleResult:
        """Choose the next token of one sequence (:meth:`sample_many` with one row).

        Args:
            logits: ``[V]`` logits of the last position (any float dtype; cast to fp32).
            params: the request's :class:`SamplingParams`.
            context_ids: prompt + output ids so far (repetition penalty): a list or ``[N]``.
            output_ids: output ids so far (presence/frequency penalties): a list or ``[M]``.
            generator: the request's generator (seeded), or ``None`` for torch's global one.

        Raises:
            NonFiniteLogitsError: the logits hold NaN or inf.
        """
        out = self.sample_many(logits[None], [params], [generator],
                               lambda i: (context_ids, output_ids))[0]
        if isinstance(out, Exception):
            raise out
        return out

    def sample_many(self, logits: torch.Tensor, params: list[SamplingParams],
                    generators: list[torch.Generator | None],
                    context: Callable[[int], tuple]) -> list[SampleResult | Exception]:
        """Choose the next token of every sequence of a step, all rows at once.

        Penalties, temperature, top-k, top-p and min-p run on ``[N, V]`` (each only on the rows
        that use it), greedy rows take the argmax, each sampled row draws once from its own
        generator, and tokens, probabilities, candidates and the finite check come back to
        the host in one packed transfer (on the CPU made by one operator,
        :mod:`engine.worker.kernels.row_summary`, with the same values). Each row gets bit for
        bit what it would get alone.

        Args:
            logits: ``[N, V]`` logits, one row per sequence.
            params: ``N`` sampling settings.
            generators: ``N`` generators (``None`` for torch's global one).
            context: ``context(i)`` returns row ``i``'s ``(context_ids, output_ids)`` (lists
                or 1-D int64 tensors) for the penalties; called only for rows that use one.

        Returns:
            ``N`` items: a :class:`SampleResult`, or :class:`NonFiniteLogitsError` for a row
            whose logits hold NaN or inf (that row fails alone).
        """
        x = logits.float()
        n, vocab = x.shape
        dev = x.device
        fast = row_summary.available(x)    # CPU: one operator for the results (below)
        # one summation tells finite rows apart (NaN or inf makes the sum non-finite); a row
        # flagged here is checked element by element after the transfer (a finite row whose
        # sum overflows is not an error)
        finite = None if fast else torch.isfinite(x.sum(dim=-1))
        x = self._penalize(x, params, context)
        scored = x  # greedy rows take the argmax of the penalised logits
        temps = [1.0 if p.greedy else p.temperature for p in params]
        if any(t != 1.0 for t in temps):
            x = x / torch.tensor(temps, dtype=x.dtype, device=dev)[:, None]
        x = top_k_top_p_rows(x, [p.top_k for p in params], [p.top_p for p in params])
        probs = torch.softmax(x, dim=-1)
        probs = min_p_rows(probs, [p.min_p for p in params])
        k = min(TOP_CANDIDATES, vocab)
        drawn = [i for i, p in enumerate(params) if not p.greedy]
        failed: dict[int, Exception] = {}
        packed = (_pack_by_operator(scored, probs, drawn, generators, k, failed) if fast else
                  _pack_by_torch(scored, probs, finite, drawn, generators, k, failed))
        out: list[SampleResult | Exception] = []
        for i, (token, prob, top_ids, top_probs, ok) in enumerate(packed):
            if not ok or i in failed:  # rare: one more transfer for this row
                bad = int((~torch.isfinite(logits[i])).sum())
                if bad:
                    out.append(NonFiniteLogitsError(
                        f"model produced {bad} non-finite logits (NaN or inf)"))
                    continue
                if i in failed:
                    out.append(failed[i])
                    continue
            out.append(sample_result(int(token), prob, top_ids, top_probs))
        return out

    def _penalize(self, x: torch.Tensor, params: list[SamplingParams], context) -> torch.Tensor:
        """Repetition, presence and frequency penalties on the rows that use them (the rules
        of :func:`apply_penalties`, with the seen tokens and counts scattered into ``[R, V]``)."""
        rows = [i for i, p in enumerate(params)
                if p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty]
        if not rows:
            return x
        n, vocab = x.shape
        dev = x.device
        ctx, outs = zip(*(context(i) for i in rows))
        sub = x[rows]
        exempt = self._exempt_mask(vocab, dev)
        extra = [(j, t) for j, i in enumerate(rows) for t in params[i].stop_token_ids if t < vocab]
        if exempt is not None or extra:
            ex = torch.zeros((len(rows), vocab), dtype=torch.bool, device=dev)
            if exempt is not None:
                ex |= exempt
            if extra:
                ex[[j for j, _ in extra], [t for _, t in extra]] = True
        else:
            ex = None
        rep = [params[i].repetition_penalty for i in rows]
        if any(r != 1.0 for r in rep):
            seen = count_ids(padded_ids(ctx, vocab, dev), len(rows), vocab) > 0
            if ex is not None:
                seen &= ~ex
            pen = torch.tensor(rep, dtype=x.dtype, device=dev)[:, None]
            sub = torch.where(seen, torch.where(sub > 0, sub / pen, sub * pen), sub)
        fp = [(params[i].frequency_penalty, params[i].presence_penalty) for i in rows]
        if any(f or p for f, p in fp):
            counts = count_ids(padded_ids(outs, vocab, dev), len(rows), vocab).to(x.dtype)
            if ex is not None:
                counts = counts.masked_fill(ex, 0)
            f = torch.tensor([a for a, _ in fp], dtype=x.dtype, device=dev)[:, None]
            p = torch.tensor([b for _, b in fp], dtype=x.dtype, device=dev)[:, None]
            sub = sub - f * counts - p * (counts > 0).to(x.dtype)
        x = x.clone()
        x[rows] = sub
        return x



def _draw(probs: torch.Tensor, drawn: list[int], generators, failed: dict, into: torch.Tensor):
    """One multinomial draw per sampled row ``i`` in ``drawn`` into ``into[i]`` (a row whose
    draw raises, e.g. NaN probabilities on CPU, goes to ``failed`` and fails alone)."""
    for i in drawn:
        try:
            into[i] = torch.multinomial(probs[i], 1, generator=generators[i])[0]
        except RuntimeError as exc:
            failed[i] = exc


def _pack_by_operator(scored, probs, drawn, generators, k, failed) -> list[tuple]:
    """``(token, prob, top ids, top probs, finite)`` per row from one pass of the row summary
    operator (CPU) and one transfer."""
    chosen = torch.full((scored.shape[0],), -1, dtype=torch.long)     # -1: the row's argmax
    _draw(probs, drawn, generators, failed, chosen)
    rows = row_summary.row_summary(scored.contiguous(), probs.contiguous(), chosen, k).tolist()
    return [(r[0], r[1], r[3:3 + k], r[3 + k:], r[2]) for r in rows]


def _pack_by_torch(scored, probs, finite, drawn, generators, k, failed) -> list[tuple]:
    """The same as :func:`_pack_by_operator` with PyTorch operations (any device)."""
    tokens = row_argmax(scored)
    if drawn:
        # a NaN row must not reach a GPU's multinomial (a device-side assert)
        safe = (torch.where(finite[:, None], probs, 1.0 / probs.shape[-1])
                if probs.device.type == "cuda" else probs)
        _draw(safe, drawn, generators, failed, tokens)
    top_values, top_indices = row_topk(probs, k)
    flat = torch.cat([tokens.double()[:, None], probs.gather(1, tokens[:, None]).double(),
                      top_indices.double(), top_values.double(),
                      finite.double()[:, None]], dim=1).tolist()          # one transfer
    return [(r[0], r[1], r[2:2 + k], r[2 + k:2 + 2 * k], r[-1]) for r in flat]

def sample_result(token: int, prob: float, top_ids, top_probs) -> SampleResult:
    """A :class:`SampleResult` whose candidates leave out filtered tokens (probability 0);
    ``top_ids`` may be floats from a packed transfer (they become ints)."""
    pairs = [(int(i), p) for i, p in zip(top_ids, top_probs) if p > 0]
    return SampleResult(token_id=token, prob=prob, top_ids=[i for i, _ in pairs],
                        top_probs=[p for _, p in pairs])
