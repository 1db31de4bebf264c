"""HTML of the decoding tab: n samples side by side, and the live beam search view.

Plain functions of plain data (the engine's events and outputs), so they are tested without a
browser. Every text that came from the model or the user is escaped.
"""

from __future__ import annotations

import html

LESSON = """
### Three decoding families, and what beam search costs

**Greedy** takes the most likely token every step; **sampling** draws from the distribution
(temperature, top-k, top-p shape it), so several samples of one prompt differ; **beam search**
keeps the *k* most likely partial answers (beams) at every step and returns the best finished one.

**When beam search helps.** Where one answer is right and the model is confident about it:
translation, summarising, speech recognition. There the most likely sequence is what you want.
**Where it hurts.** In open chat and stories the most likely sequence is short, bland and often
repetitive (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration"): sampling reads
more like a person. Beam search also costs *k* forward rows per step for one answer.

**Why paging makes its memory cheap.** *k* beams are *k* sequences, so a naive cache holds *k*
copies of the prompt's keys and values. With a paged cache (PagedAttention, Kwon et al. 2023,
§4.4) a beam that branches off *forks*: its block table points at the same physical blocks, and a
reference count says how many beams hold each one. Only the last, partly filled block is copied,
and only when a beam writes into a block it shares (*copy-on-write*). A beam that falls out of the
top *k* frees its blocks. Below, shared blocks show their reference count: the logical tokens
(what *k* separate caches would hold, the "k times the KV cache" of the Lessons tab's
sampling explorer) against the physical blocks really in use.
"""


def _esc(text: str) -> str:
    return html.escape(text or "").replace("\n", "<br>")


def samples_html(texts: dict[int, str], done: dict[int, dict] | None = None) -> str:
    """The samples side by side.

    Args:
        texts: text so far of each sample index.
        done: per index, ``{"finish_reason", "cumulative_logprob"}`` once finished.
    """
    if not texts:
        return "<div class='decoding-empty'>The samples appear here, side by side.</div>"
    done = done or {}
    cols = []
    for i in sorted(texts):
        d = done.get(i)
        foot = (f"<div class='decoding-foot'>{html.escape(str(d['finish_reason']))} · "
                f"cumulative logprob {d['cumulative_logprob']:.2f}</div>") if d else ""
        cols.append(f"<div class='decoding-col' data-index='{i}'><div class='decoding-head'>sample "
                    f"{i}</div><div class='decoding-text'>{_esc(texts[i])}</div>{foot}</div>")
    return ("<div class='decoding-samples' style='display:grid;grid-template-columns:repeat("
            f"{min(len(cols), 4)},minmax(0,1fr));gap:8px'>{''.join(cols)}</div>")


def _tokens(ids: list[int], decode) -> str:
    return "".join(f"<span class='beam-tok'>{_esc(decode([t]))}</span>" for t in ids)


def beam_html(view: dict | None, decode, block_size: int, final: list[dict] | None = None,
              last_live: dict | None = None) -> str:
    """The beam search at one step.

    Args:
        view: an event's ``beams`` (:func:`engine.core.sequence_group.beam_view`), or ``None``.
        decode: ``token ids -> text`` (the tokenizer's decode).
        block_size: tokens per KV block.
        final: the output's answers (``{"text", "score", "finish_reason"}``) once done.
        last_live: the latest view that still had live beams; when ``view`` has none (the
            search has ended) the logical-against-physical summary is that step's, so it stays.

    Returns:
        Live beams with their tokens, cumulative logprobs and block tables (a shared block shows
        its reference count), the pruned beams, finished hypotheses (their raw cumulative
        logprob and their length-normalised score in separate columns), and the logical against
        physical KV tokens.
    """
    if not view:
        return "<div class='decoding-empty'>The beams appear here, step by step.</div>"
    refs = {int(k): v for k, v in (view.get("ref_counts") or {}).items()}
    live = view.get("live") or []
    rows = []
    for rank, b in enumerate(live):
        # one boxed chip per block, its reference count inside after a space and the chips
        # apart, so "73 ×4" and "469" never run together into "73×469"
        cells = " ".join(
            f"<span class='blk{' blk-shared' if blk in refs else ''}' title='block {blk}"
            f"{f', held by {refs[blk]} beams' if blk in refs else ''}'>"
            f"{blk}{f' <span class=blk-ref>×{refs[blk]}</span>' if blk in refs else ''}</span>"
            for blk in b["blocks"])
        rows.append(f"<tr class='beam-live'><td>#{rank + 1}</td><td>{b['logprob']:.3f}</td><td>–</td>"
                    f"<td>{_tokens(b['token_ids'], decode)}</td><td class='beam-blocks'>{cells}</td></tr>")
    pruned = "".join(
        f"<tr class='beam-pruned'><td>step {p['step']}</td><td>{p['logprob']:.3f}</td><td>–</td>"
        f"<td><s>{_tokens(p['token_ids'], decode)}</s></td><td>freed</td></tr>"
        for p in reversed((view.get("pruned") or [])[-6:]))
    fin = "".join(
        f"<tr class='beam-finished'><td>{html.escape(str(h['reason']))}</td><td>{_logprob(h)}</td>"
        f"<td>{h['score']:.3f}</td><td>{_tokens(h['token_ids'], decode)}</td><td></td></tr>"
        for h in view.get("finished") or [])
    summary = _memory_summary(view if live else last_live, block_size, ended=not live)
    answer = ""
    if final:
        answer = "".join(f"<div class='beam-answer'><b>answer {i + 1}</b> (score {o['score']:.3f}, "
                         f"{html.escape(str(o['finish_reason']))}): {_esc(o['text'])}</div>"
                         for i, o in enumerate(final))
    head = ("<tr><th></th><th>cumulative logprob</th><th>score (logprob ÷ length<sup>penalty</sup>, "
            "finished only)</th><th>tokens</th><th>block table (×n: shared by n beams)</th></tr>")
    return (f"<div class='beam-view'><div class='beam-step'>step {view.get('step', 0)}</div>{summary}"
            f"<table class='beam-table'>{head}{''.join(rows)}"
            f"{'<tr><th colspan=5>finished hypotheses</th></tr>' + fin if fin else ''}"
            f"{'<tr><th colspan=5>pruned beams</th></tr>' + pruned if pruned else ''}"
            f"</table>{answer}</div>")


def _logprob(h: dict) -> str:
    lp = h.get("logprob")
    return f"{lp:.3f}" if lp is not None else "–"


def _memory_summary(view: dict | None, block_size: int, ended: bool) -> str:
    """Logical against physical KV tokens of a view with live beams (``""`` without one); once
    the search has ended, said of the last step that had them."""
    live = (view or {}).get("live") or []
    n = len(live)
    if not n:
        return ""
    logical, physical = view.get("logical_tokens", 0), view.get("physical_tokens", 0)
    shared = len(view.get("ref_counts") or {})
    when = f"At step {view.get('step', 0)}, the last with live beams, " if ended else ""
    return (f"<div class='beam-memory'>{when}{n} beams: {logical:,} tokens logically "
            f"({n} × {logical // n:,}), {physical:,} tokens of blocks physically "
            f"({view.get('physical_blocks', 0)} blocks of {block_size}); {shared} blocks shared.</div>")



_ENDED = {"stop": "stopped (EOS)", "length": "hit the length limit", "abort": "stopped by you",
          "error": "failed"}


def finish_summary(reasons: list, noun: str = "answer") -> str:
    """The status line once a request with one or more answers ends: how many ended for each
    reason, e.g. ``"Finished: 2 stopped (EOS), 2 hit the length limit (of 4 samples)"``, or
    ``"Finished: all 4 samples hit the length limit"`` when they agree.

    Args:
        reasons: each answer's finish reason (``stop``, ``length``, ``abort``, ``error``; any
            other is named as it is), in the answers' order.
        noun: what an answer is called (``"sample"``, ``"answer"``); ``s`` makes its plural.
    """
    if not reasons:
        return "Finished"
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[str(reason)] = counts.get(str(reason), 0) + 1
    n = len(reasons)
    if len(counts) == 1:
        (reason,) = counts
        who = f"the {noun}" if n == 1 else f"all {n} {noun}s"
        return f"Finished: {who} {_ENDED.get(reason, reason)}"
    parts = ", ".join(f"{k} {_ENDED.get(reason, reason)}" for reason, k in counts.items())
    return f"Finished: {parts} (of {n} {noun}s)"
