"""The sampling explorer's engine side: one step's logits again, and reshaping them.

:func:`step_logits` recomputes the logits of one step of a finished answer (one forward pass
over the prompt and the answer's tokens before that step), on the engine's own thread, the
model's only user. :func:`reshape` applies the repetition penalty, temperature, top-k, top-p and
min-p to them exactly as :func:`engine.worker.sampler.apply_penalties` and
:func:`engine.worker.sampler.apply_filters` do, but with numpy, so a page can redraw the bars
on every slider move without torch or the model. Temperature 0 is greedy decoding: all the
probability on the most likely token (after the penalty). Presence and frequency penalties are
not shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TOP = 20
NAMED = 200  # candidates whose text is kept: the penalty can lift a token into the top TOP


@dataclass
class StepLogits:
    """The logits of one step, sorted from most to least likely.

    Attributes:
        step: output position (0 = the token that prefill produced).
        token_ids, texts, logits: the ``TOP`` most likely tokens (ids, decoded texts, raw logits).
        chosen_id, chosen_text: the token the answer actually has at this step.
        chosen_rank: its rank among all tokens (0 = most likely).
        sorted_logits: every vocabulary logit, descending (float64), for exact normalisation.
        sorted_ids: ``[V]`` int64, the vocabulary ids in the order of ``sorted_logits``.
        named_texts: decoded texts of the first ``NAMED`` ids of ``sorted_ids``.
        seen: ``[V]`` bool in the order of ``sorted_logits``: the token occurs in the prompt or
            in the answer before this step and is not exempt from penalties (EOS, the chat
            template's special tokens), i.e. the tokens a repetition penalty touches.
    """

    step: int
    token_ids: list[int]
    texts: list[str]
    logits: list[float]
    chosen_id: int
    chosen_text: str
    chosen_rank: int
    sorted_logits: np.ndarray
    sorted_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    named_texts: list[str] = field(default_factory=list)
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def top(self) -> list[tuple[str, float]]:
        """``(token_text, logit)`` of the ``TOP`` candidates, most likely first."""
        return list(zip(self.texts, self.logits))


def step_logits(engine, prompt_ids: list[int], output_ids: list[int], step: int,
                k: int = TOP) -> StepLogits:
    """Recompute the logits the model produced at ``step`` of an answer.

    Args:
        engine: the running :class:`engine.LLMEngine` (its thread runs the forward pass
            between two steps, through :meth:`engine.LLMEngine.call`).
        prompt_ids: the answer's prompt token ids.
        output_ids: the answer's generated token ids.
        step: ``0 <= step < len(output_ids)``.
        k: how many top candidates to name.

    Returns:
        :class:`StepLogits` (one forward pass over ``prompt + output[:step]`` tokens).

    Raises:
        ValueError: ``step`` out of range.
    """
    import torch

    if not 0 <= step < len(output_ids):
        raise ValueError(f"step must be in [0, {len(output_ids) - 1}], got {step}")
    ids = list(prompt_ids) + list(output_ids[:step])
    logits = engine.call(lambda runner: runner.recompute(ids).float().cpu()).result()
    values, order = torch.sort(logits, descending=True)
    order_np = order.numpy().astype(np.int64)
    chosen = int(output_ids[step])
    tok = engine.tokenizer
    named = [tok.decode([int(i)]) for i in order_np[:max(k, NAMED)]]
    exempt = _exempt_ids(engine)
    seen_ids = np.array(sorted(set(int(i) for i in ids) - exempt), dtype=np.int64)
    return StepLogits(step=step, token_ids=order_np[:k].tolist(), texts=named[:k],
                      logits=values[:k].tolist(), chosen_id=chosen, chosen_text=tok.decode([chosen]),
                      chosen_rank=int(np.flatnonzero(order_np == chosen)[0]),
                      sorted_logits=values.double().numpy().copy(), sorted_ids=order_np,
                      named_texts=named, seen=np.isin(order_np, seen_ids))


def _exempt_ids(engine) -> set[int]:
    """Ids the sampler's penalties never touch: the model's EOS set and special tokens."""
    from engine.model.special_tokens import special_token_ids

    loaded = getattr(engine, "loaded", None)
    if loaded is None:
        return set()
    return {int(i) for i in (set(loaded.eos_token_ids) | special_token_ids(loaded.tokenizer))}


def _softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x[np.isfinite(x)]) if np.isfinite(x).any() else 0.0
    e = np.exp(x - m)
    return e / e.sum()


def penalize(sorted_logits, seen, repetition_penalty: float = 1.0) -> np.ndarray:
    """The repetition penalty on the tokens already seen (``apply_penalties``' rule).

    Rule (CTRL, Keskar et al. 2019, as Hugging Face and vLLM apply it): for every token that
    occurs in the prompt or the output so far, a positive logit is divided by the penalty and a
    negative one multiplied by it, so with a penalty above 1 a seen token always loses logit,
    whatever its sign; 1 changes nothing, below 1 favours repeats.

    Args:
        sorted_logits: ``[V]`` logits; seen: ``[V]`` bool, the tokens the penalty touches.
        repetition_penalty: ``> 0``.

    Returns:
        ``[V]`` float64 logits in the same order (no longer sorted when the penalty moved some).
    """
    x = np.asarray(sorted_logits, dtype=np.float64).copy()
    if repetition_penalty != 1.0 and seen is not None and len(seen):
        s = np.asarray(seen, dtype=bool)
        x[s] = np.where(x[s] > 0, x[s] / repetition_penalty, x[s] * repetition_penalty)
    return x


def reshape(sorted_logits, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
            min_p: float = 0.0, repetition_penalty: float = 1.0, seen=None) -> np.ndarray:
    """Probabilities after the repetition penalty, temperature, top-k, top-p and min-p (the
    sampler's rules and order).

    Args:
        sorted_logits: every vocabulary logit, sorted descending.
        temperature: ``> 0`` divides the logits; ``0`` is greedy decoding: probability 1 on the
            most likely token (after the penalty), 0 elsewhere, whatever the filters.
        top_k: keep the ``top_k`` largest; ``<= 0`` keeps all.
        top_p: keep the most likely tokens until the mass before a token reaches ``top_p``.
        min_p: drop tokens below ``min_p`` × the top probability.
        repetition_penalty, seen: see :func:`penalize` (``seen`` in the same order).

    Returns:
        ``[V]`` probabilities in the order of ``sorted_logits``, summing to 1; filtered tokens
        are 0.
    """
    x = penalize(sorted_logits, seen, repetition_penalty)
    order = np.argsort(-x, kind="stable")  # the identity unless the penalty reordered tokens
    probs = np.empty_like(x)
    probs[order] = _filter(x[order], temperature, top_k, top_p, min_p)
    return probs


def _filter(x: np.ndarray, temperature: float, top_k: int, top_p: float, min_p: float) -> np.ndarray:
    """Temperature and the three filters on logits sorted descending; probabilities."""
    if temperature <= 0:
        probs = np.zeros_like(x)
        probs[0] = 1.0
        return probs
    x = x / temperature
    if 0 < top_k < x.size:
        x[x < x[top_k - 1]] = -np.inf
    if top_p < 1.0:
        p = _softmax(x)
        drop = (np.cumsum(p) - p) >= top_p
        drop[0] = False
        x[drop] = -np.inf
    probs = _softmax(x)
    if min_p > 0:
        probs[probs < min_p * probs.max()] = 0.0
        probs = probs / probs.sum()
    return probs


def view(sl: StepLogits, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
         min_p: float = 0.0, repetition_penalty: float = 1.0) -> dict:
    """What the explorer draws for one setting of the five sliders.

    The candidates are the ``TOP`` most likely tokens after the sliders (ties, such as tokens
    filtered to 0, in the model's own order), chosen among the ``NAMED`` most likely of the
    model, so a penalty that demotes a seen token lets the next ones move up.

    Returns:
        ``texts``, ``token_ids``, ``probs`` (those candidates after reshaping, in [0, 1]),
        ``raw_probs`` (the same tokens at temperature 1 with no penalty and no filters),
        ``seen`` (bool per candidate: the penalty touches it), ``kept`` (tokens of the whole
        vocabulary left with probability > 0), ``chosen_rank``, ``chosen_prob`` (the actual
        token's probability after reshaping), ``greedy`` (temperature 0) and
        ``penalized`` (seen tokens in the vocabulary when the penalty is on, else 0).
    """
    seen = sl.seen if len(sl.seen) == len(sl.sorted_logits) else None
    probs = reshape(sl.sorted_logits, temperature, top_k, top_p, min_p, repetition_penalty, seen)
    raw = reshape(sl.sorted_logits)
    named = min(len(sl.named_texts), probs.size) if sl.named_texts else len(sl.token_ids)
    idx = np.lexsort((np.arange(named), -probs[:named]))[:len(sl.token_ids)]
    texts = sl.named_texts if sl.named_texts else sl.texts
    ids = sl.sorted_ids if len(sl.sorted_ids) else np.asarray(sl.token_ids)
    return {"texts": [texts[i] for i in idx], "token_ids": [int(ids[i]) for i in idx],
            "probs": probs[idx].tolist(), "raw_probs": raw[idx].tolist(),
            "seen": [bool(seen[i]) if seen is not None else False for i in idx],
            "kept": int((probs > 0).sum()), "chosen_rank": sl.chosen_rank,
            "chosen_prob": float(probs[sl.chosen_rank]), "greedy": temperature <= 0,
            "penalized": int(seen.sum()) if seen is not None and repetition_penalty != 1.0 else 0}
