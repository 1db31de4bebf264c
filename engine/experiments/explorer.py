"""The sampling explorer's engine side: one step's logits again, and reshaping them.

:func:`step_logits` recomputes the logits of one step of a finished answer (one forward pass
over the prompt and the answer's tokens before that step), on the engine's own thread, the
model's only user. :func:`reshape` applies temperature,
top-k, top-p and min-p to them exactly as :func:`engine.worker.sampler.apply_filters` does, but with
numpy, so a page can redraw the bars on every slider move without torch or the model.
Penalties (repetition, presence, frequency) are not applied: the bars show the model's own
distribution shaped by the four filters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOP = 20


@dataclass
class StepLogits:
    """The logits of one step, sorted from most to least likely.

    Attributes:
        step: output position (0 = the token that prefill produced).
        token_ids, texts, logits: the ``TOP`` most likely tokens (ids, decoded texts, raw logits).
        chosen_id, chosen_text: the token the answer actually has at this step.
        chosen_rank: its rank among all tokens (0 = most likely).
        sorted_logits: every vocabulary logit, descending (float64), for exact normalisation.
    """

    step: int
    token_ids: list[int]
    texts: list[str]
    logits: list[float]
    chosen_id: int
    chosen_text: str
    chosen_rank: int
    sorted_logits: np.ndarray

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
    order_list = order.tolist()
    chosen = int(output_ids[step])
    tok = engine.tokenizer
    top = order_list[:k]
    return StepLogits(step=step, token_ids=top, texts=[tok.decode([i]) for i in top],
                      logits=values[:k].tolist(), chosen_id=chosen, chosen_text=tok.decode([chosen]),
                      chosen_rank=order_list.index(chosen),
                      sorted_logits=values.double().numpy().copy())


def _softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x[np.isfinite(x)]) if np.isfinite(x).any() else 0.0
    e = np.exp(x - m)
    return e / e.sum()


def reshape(sorted_logits, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
            min_p: float = 0.0) -> np.ndarray:
    """Probabilities after temperature, top-k, top-p and min-p (same rules as ``apply_filters``).

    Args:
        sorted_logits: every vocabulary logit, sorted descending.
        temperature: ``> 0`` divides the logits; ``0`` is shown as 1 (greedy takes the top one).
        top_k: keep the ``top_k`` largest; ``<= 0`` keeps all.
        top_p: keep the most likely tokens until the mass before a token reaches ``top_p``.
        min_p: drop tokens below ``min_p`` × the top probability.

    Returns:
        Probabilities in the same (sorted) order, summing to 1; filtered tokens are 0.
    """
    x = np.asarray(sorted_logits, dtype=np.float64).copy()
    if temperature > 0:
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
         min_p: float = 0.0) -> dict:
    """What the explorer draws for one setting of the four sliders.

    Returns:
        ``texts``, ``token_ids``, ``probs`` (the ``TOP`` candidates after reshaping, in [0, 1]),
        ``raw_probs`` (the same at temperature 1 with no filters), ``kept`` (tokens of the whole
        vocabulary left with probability > 0), ``chosen_rank``, ``chosen_prob`` (the actual
        token's probability after reshaping) and ``greedy`` (temperature 0).
    """
    probs = reshape(sl.sorted_logits, temperature, top_k, top_p, min_p)
    raw = reshape(sl.sorted_logits)
    k = len(sl.token_ids)
    return {"texts": list(sl.texts), "token_ids": list(sl.token_ids),
            "probs": probs[:k].tolist(), "raw_probs": raw[:k].tolist(),
            "kept": int((probs > 0).sum()), "chosen_rank": sl.chosen_rank,
            "chosen_prob": float(probs[sl.chosen_rank]), "greedy": temperature == 0}
