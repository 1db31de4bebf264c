"""The sampler: from one position's logits to the next token, in fp32.

Order of operations (as in Hugging Face's logits processors, so settings compare):
repetition penalty -> presence/frequency penalty -> temperature -> top-k -> top-p -> min-p ->
softmax -> argmax (temperature 0) or a draw from the request's own ``torch.Generator``.
"""

from __future__ import annotations

from typing import Callable

import torch

from engine.errors import NonFiniteLogitsError
from engine.params import SAMPLING_EPS, SamplingParams
from engine.outputs import SampleResult

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
        sorted_x, order = torch.sort(x, descending=True)
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


def _check_finite(x: torch.Tensor) -> None:
    """Raise :class:`NonFiniteLogitsError` if the ``[V]`` logits hold NaN or inf."""
    # one vectorised sum is much cheaper than an element-wise isfinite over the vocabulary:
    # any NaN or inf makes the sum non-finite; a finite row whose sum overflows is re-checked.
    if bool(torch.isfinite(x.sum())) or bool(torch.isfinite(x).all()):
        return
    bad = int((~torch.isfinite(x)).sum())
    raise NonFiniteLogitsError(f"model produced {bad} non-finite logits (NaN or inf)")


def _is_plain(params: SamplingParams, vocab: int) -> bool:
    """Whether only temperature applies (no penalty, top-k, top-p or min-p): such rows of a
    step are sampled together in :meth:`Sampler.sample_many`."""
    return (params.repetition_penalty == 1.0 and not params.presence_penalty
            and not params.frequency_penalty and not 0 < params.top_k < vocab
            and params.top_p >= 1.0 and params.min_p <= 0)


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

    def sample(self, logits: torch.Tensor, params: SamplingParams, context_ids: torch.Tensor,
               output_ids: torch.Tensor, generator: torch.Generator | None) -> SampleResult:
        """Choose the next token.

        Args:
            logits: ``[V]`` logits of the last position (any float dtype; cast to fp32).
            params: the request's :class:`SamplingParams`.
            context_ids: ``[N]`` prompt + output ids so far (for the repetition penalty).
            output_ids: ``[M]`` output ids so far (presence/frequency penalties).
            generator: the request's generator (seeded), or ``None`` for torch's global one.

        Returns:
            :class:`SampleResult`.

        Raises:
            NonFiniteLogitsError: the logits hold NaN or inf.
        """
        x = logits.float()
        _check_finite(x)
        x = apply_penalties(x, params, context_ids, output_ids,
                            self._exempt_mask(x.shape[-1], x.device))
        probs = apply_filters(x, params.temperature, params.top_k, params.top_p, params.min_p)
        if params.greedy:
            token = int(torch.argmax(x))
        else:
            token = int(torch.multinomial(probs, 1, generator=generator))
        k = min(TOP_CANDIDATES, probs.shape[-1])
        top = torch.topk(probs, k)
        return _result(token, float(probs[token]), top.indices.tolist(), top.values.tolist())

    def sample_many(self, logits: torch.Tensor, params: list[SamplingParams],
                    generators: list[torch.Generator | None],
                    context: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
                    ) -> list[SampleResult | Exception]:
        """Choose the next token of every sequence of a step.

        Rows that only use a temperature (the common case, and every greedy benchmark row) go
        through one softmax, one top-k and one argmax over ``[n, V]``; the others, and any row
        that fails, go through :meth:`sample` one by one. Each row gets the same token and
        probabilities as :meth:`sample` would give it alone (same kernels, same generator).

        Args:
            logits: ``[N, V]`` logits, one row per sequence.
            params: ``N`` sampling settings.
            generators: ``N`` generators (``None`` for torch's global one).
            context: ``context(i)`` returns row ``i``'s ``(context_ids, output_ids)`` for the
                penalties; called only for rows that need it.

        Returns:
            ``N`` items: a :class:`SampleResult`, or the exception that row raised
            (:class:`NonFiniteLogitsError` for NaN/inf logits) so one bad row fails alone.
        """
        x = logits.float()
        vocab = x.shape[-1]
        finite = torch.isfinite(x.sum(-1)).tolist()
        out: list[SampleResult | Exception | None] = [None] * len(params)
        plain = [i for i, p in enumerate(params) if finite[i] and _is_plain(p, vocab)]
        if plain:
            try:
                rows = x if len(plain) == len(params) else x[plain]
                temps = [1.0 if params[i].greedy else params[i].temperature for i in plain]
                scaled = rows
                if any(t != 1.0 for t in temps):
                    scaled = rows / torch.tensor(temps, dtype=rows.dtype, device=rows.device)[:, None]
                probs = torch.softmax(scaled, dim=-1)
                top = torch.topk(probs, min(TOP_CANDIDATES, vocab), dim=-1)
                argmax = torch.argmax(rows, dim=-1).tolist()
                top_ids, top_probs = top.indices.tolist(), top.values.tolist()
            except Exception:  # noqa: BLE001 - leave these rows to the one-by-one path below
                plain = []
            for j, i in enumerate(plain):
                try:
                    tid = argmax[j] if params[i].greedy else int(
                        torch.multinomial(probs[j], 1, generator=generators[i]))
                    out[i] = _result(tid, float(probs[j, tid]), top_ids[j], top_probs[j])
                except Exception as exc:  # noqa: BLE001 - returned, so the row fails alone
                    out[i] = exc
        for i, p in enumerate(params):
            if out[i] is None:
                try:
                    ctx, outs = context(i)
                    out[i] = self.sample(logits[i], p, ctx, outs, generators[i])
                except Exception as exc:  # noqa: BLE001 - returned, so the row fails alone
                    out[i] = exc
        return out


def _result(token: int, prob: float, top_ids: list[int], top_probs: list[float]) -> SampleResult:
    """A :class:`SampleResult` whose candidates leave out filtered tokens (probability 0)."""
    pairs = [(i, p) for i, p in zip(top_ids, top_probs) if p > 0]
    return SampleResult(token_id=token, prob=prob, top_ids=[i for i, _ in pairs],
                        top_probs=[p for _, p in pairs])
