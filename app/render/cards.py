"""Small HTML pieces of the page: stat cards, status bar, model badge, KV formula, rolling table.

Pure functions of plain numbers and dicts (no Gradio, no torch).
"""

from __future__ import annotations

import html
from decimal import ROUND_HALF_UP, Decimal

from engine.model.model_spec import kv_bytes_per_token  # the one KV formula (no torch)

from app.render.fmt import fmt_bytes, fmt_int, fmt_params, fmt_rate, fmt_seconds

CARDS = (
    ("ttft_s", "TTFT", "first token − arrival", "time to first token: first token − arrival",
     fmt_seconds),
    ("tpot_s", "TPOT", "decode time / (N − 1)",
     "time per output token after the first: decode time / (N − 1)", fmt_seconds),
    ("decode_tokens_per_s", "decode speed", "(N − 1) / decode time",
     "(output tokens − 1) / decode time", fmt_rate),
    ("prefill_tokens_per_s", "prefill speed", "computed / prefill",
     "computed prompt tokens / prefill time (prefix-cache hits cost no compute, so they are not "
     "counted)", fmt_rate),
    ("e2e_s", "end-to-end", "finish − arrival", "finish − arrival", fmt_seconds),
    ("queue_time_s", "queue time", "start − arrival",
     "waiting before the engine started it: start − arrival", fmt_seconds),
)
"""Each card: metrics key, label, the short definition printed under the value (one line on the
first screen at 1280 px, with N the output tokens of the line below the cards), the full one
shown as its tooltip, and the value's format."""


def stat_cards_html(metrics: dict | None) -> str:
    """Six stat cards (TTFT, TPOT, decode and prefill tokens/s, e2e, queue time).

    Args:
        metrics: ``RunState.live_metrics()`` (seconds, tokens/s; ``None`` values show "–"),
            or ``None`` before any request.
    """
    metrics = metrics or {}
    cards = []
    for key, label, short, definition, fmt in CARDS:
        value = fmt(metrics.get(key)) if metrics.get(key) is not None else "–"
        if key == "tpot_s" and metrics.get("final") and (metrics.get("output_tokens") or 0) < 2:
            value = "–"         # decode time / (N − 1) has no value for one token
        elif key == "tpot_s" and value != "–":
            value = card_tpot(metrics) or value
        elif key == "prefill_tokens_per_s":
            short = _prefill_short(metrics) or short
        cards.append(
            f"<div class='stat-card' title='{html.escape(definition)}'><div class='stat-label'>{label}</div>"
            f"<div class='stat-value'>{value}</div><div class='stat-def'>{html.escape(short)}</div></div>")
    tokens = ""
    if metrics:
        state = "final (engine metrics)" if metrics.get("final") else "live estimate"
        tokens = (f"<div class='stat-foot'>{_prompt_tokens(metrics)} · "
                  f"N = {fmt_int(metrics.get('output_tokens'))} output tokens · {state}</div>"
                  f"{latency_formula_html(metrics)}")
    return f"<div class='stat-grid'>{''.join(cards)}</div>{tokens}"


def card_tpot(metrics: dict) -> str | None:
    """TPOT as both the card and the latency formula print it (:func:`_formula_tpot`'s digits),
    so the card's TTFT, TPOT and N reproduce the formula's total; ``None`` while the formula
    has no line (no first token or no TPOT yet)."""
    n = int(metrics.get("output_tokens") or 0)
    ttft, tpot = metrics.get("ttft_s"), metrics.get("tpot_s")
    if n < 2 or ttft is None or not tpot:
        return None
    return _formula_tpot(tpot, n, ttft + tpot * (n - 1))


def _prefill_short(metrics: dict) -> str | None:
    """The prefill card's line under its value, with the run's own numbers: ``"2 ÷ 274.0 ms ·
    48 cached"`` (computed prompt tokens ÷ prefill time gives the value; the prefix cache's tokens
    are named, not counted; short enough for one line of a card at 1280 px), or ``None`` before
    the prefill time is known."""
    prefill_s = metrics.get("prefill_time_s")
    if not prefill_s or metrics.get("prefill_tokens_per_s") is None:
        return None
    prompt = int(metrics.get("prompt_tokens") or 0)
    cached = int(metrics.get("cached_prompt_tokens") or 0)
    computed = metrics.get("computed_prompt_tokens")
    computed = prompt - cached if computed is None else int(computed)
    line = f"{fmt_int(computed)} ÷ {fmt_seconds(prefill_s)}"
    return line + (f" · {fmt_int(cached)} cached" if cached else "")


def _prompt_tokens(metrics: dict) -> str:
    """``"640 prompt tokens (17 computed, 623 from the prefix cache)"``, or just the count."""
    prompt = metrics.get("prompt_tokens") or 0
    cached = metrics.get("cached_prompt_tokens") or 0
    text = f"{fmt_int(prompt)} prompt tokens"
    if cached:
        text += (f" (<b>{fmt_int(prompt - cached)} computed</b>, {fmt_int(cached)} from the prefix "
                 "cache)")
    return text


def latency_formula_html(metrics: dict) -> str:
    """Latency = TTFT + TPOT × (N − 1) written out with one request's own numbers.

    Args:
        metrics: ``RunState.live_metrics()``: ``ttft_s``, ``tpot_s`` (seconds, ``None`` while
            undefined), ``output_tokens`` (N), ``e2e_s``, ``final`` and optionally
            ``step_sum_s`` (the sum of the request's own step times).

    Returns:
        One ``<div class='latency-formula'>``, or ``""`` before the first token. The formula
        (docs/metrics.md) holds by the metric definitions: TTFT ends at the first token and
        the N − 1 later tokens take TPOT each on average, all from the same token timestamps as
        end-to-end, which adds only the finishing bookkeeping after the last token. The line says
        so, and checks it against something measured apart: the sum of the step times.
    """
    n = int(metrics.get("output_tokens") or 0)
    ttft = metrics.get("ttft_s")
    if not n or ttft is None:
        return ""
    tpot = metrics.get("tpot_s") or 0.0
    exact = ttft + tpot * (n - 1)
    tpot_text = _formula_tpot(tpot, n, exact)
    # the printed numbers' own sum and product, so a student's arithmetic gives the printed total
    total = _printed_total(ttft, tpot_text, n)
    e2e = metrics.get("e2e_s")
    measured = ""
    if metrics.get("final") and e2e is not None:
        after = e2e - exact      # the request's finishing bookkeeping after its last token
        measured = (f" · measured end-to-end {fmt_seconds(e2e)}: the same token timestamps, plus "
                    f"{fmt_seconds(max(0.0, after))} of finishing after the last token")
    
    steps = metrics.get("step_sum_s")
    check = ""
    if steps:
        rest = max(0.0, exact - steps)
        check = (f"<br><span title=\"measured apart from the token timestamps: the request's own "
                 "forward passes and sampling; the rest is queueing, scheduling and streaming "
                 f"between steps\">its steps add up to <b>{fmt_seconds(steps)}</b> "
                 f"(+{fmt_seconds(rest)} between them)</span>")
    return (f"<div class='latency-formula'>Latency = TTFT + TPOT × (N − 1) = {fmt_seconds(ttft)} + "
            f"{tpot_text} × ({fmt_int(n)} − 1) = <b>{fmt_seconds(total)}</b>{measured}{check}</div>")


def _printed_total(ttft_s: float, tpot_text: str, n: int) -> float:
    """Seconds of TTFT + TPOT × (N − 1) worked out from the printed numbers (TTFT as
    :func:`fmt_seconds` prints it, TPOT as ``tpot_text``) in decimal, rounded half up to the
    total's printed digit (0.1 ms below one second, else 10 ms)."""
    ttft_ms = (Decimal(f"{ttft_s * 1000:.1f}") if ttft_s < 1.0
               else Decimal(f"{ttft_s:.2f}") * 1000)
    total_ms = ttft_ms + Decimal(tpot_text.split()[0]) * max(0, n - 1)
    if total_ms < 1000:
        return float(total_ms.quantize(Decimal("0.1"), ROUND_HALF_UP)) / 1000
    return float((total_ms / 1000).quantize(Decimal("0.01"), ROUND_HALF_UP))


def _formula_tpot(tpot_s: float, n: int, total_s: float) -> str:
    """TPOT as the latency formula prints it, in ms: one decimal, or as many more (up to four;
    trailing zeros left out) as it takes for the rounding, times N − 1, to stay under half of
    the total's last printed digit (0.1 ms below one second, else 10 ms), so the total of the
    printed numbers is, within that digit, the total of the exact ones."""
    unit_s = 1e-4 if total_s < 1.0 else 1e-2
    decimals = 1
    while decimals < 4 and 0.5 * 10 ** -decimals * 1e-3 * max(0, n - 1) > unit_s / 2:
        decimals += 1
    text = f"{tpot_s * 1000:.{decimals}f}".rstrip("0")  # 40.00 is printed 40.0: the same number
    return f"{text}0 ms" if text.endswith(".") else f"{text} ms"


def status_html(text: str, kind: str = "info") -> str:
    """The status bar: ``kind`` is ``info``, ``busy``, ``ok``, ``warn`` or ``error`` (sets the colour)."""
    return f"<div class='status status-{kind}'>{html.escape(text)}</div>"


def kv_element_bytes(info) -> int:
    """Bytes per cached K or V element: the engine's KV cache dtype (``info.kv_dtype_bytes``),
    else the model's dtype."""
    return info.kv_dtype_bytes or info.dtype_bytes


def kv_dtype_label(info) -> str:
    """The KV cache's dtype name (``fp8 (e4m3)``, ``bfloat16``...), else the model's."""
    return info.kv_dtype or info.dtype


def precision_line(info) -> str:
    """Which precision runs: weights storage, compute dtype and KV cache, e.g. ``weights <b>int4</b>
    · compute bfloat16 · KV cache bfloat16``; the loader's note (how the weights got there) as a
    tooltip."""
    weights = info.weights or info.dtype
    note = info.weights_note or ""
    return (f"<div class='model-precision' title='{html.escape(note, quote=True)}'>weights "
            f"<b>{html.escape(weights)}</b> · compute {html.escape(info.dtype)} · KV cache "
            f"<b>{html.escape(kv_dtype_label(info))}</b></div>")


def decode_step_html(status) -> str:
    """One line under the badge: which decode step runs (an
    :class:`engine.protocol.CompileStatus`, ``LLMEngine.compile_status()``): compiled (its batch
    buckets and compile time, from the on-disk cache or not, and whether prompts run in the same
    graph), compiling in the background (the
    batches already compiled, a smaller batch padded to the smallest ready bucket, eager for the
    rest, and how far compiling has got), eager, or failed with the reason."""
    path, state = status.path, status.status
    if path == "remote":
        return ""
    ready, buckets = status.ready, status.buckets
    secs = status.compile_s or 0.0
    process = status.compiler == "process"
    cached = (" here, after a separate process generated the kernels" if process
              else " from the on-disk cache" if status.cache_hits else "")
    if state == "ready":
        prompts = ("; prompts run in the same graph, a row per token" if status.prompts == "rows"
                   else "")
        text = (f"decode step: <b>compiled</b> (torch.compile, batch buckets "
                f"{', '.join(map(str, buckets))}; {secs:.0f} s to compile{cached}){prompts}")
    elif state == "compiling":
        so_far = f", {status.compiling_s:.0f} s so far" if status.compiling_s else ""
        where = "in a separate process" if process else "in the background"
        progress = f"compiling {len(ready) + 1} of {len(buckets)} batch buckets {where}{so_far}"
        if ready:
            top = max(ready)
            padded = (f"; batch 1 runs padded to {min(ready)} rows until its own graph is ready"
                      if 1 not in ready else "")
            above = ", <b>eager</b> above meanwhile" if top < max(buckets) else ""
            which = "batch 1" if top == 1 else f"batches up to {top}"
            text = (f"decode step: <b>compiled</b> for {which}{above}{padded} ({progress})")
        else:
            text = (f"decode step: <b>eager</b> meanwhile, a few times slower per token ({progress})")
    elif state == "failed":
        text = f"decode step: <b>eager</b> (compiling failed: {html.escape(status.error)})"
    else:
        text = "decode step: <b>eager</b> (transformers' model code)"
    return f"<div class='decode-step'>{text}</div>"


def model_badge_html(info, remote=None) -> str:
    """The model in use, its size and its precision, from the engine's ``ModelInfo``; a remote
    engine's view (``remote``, :class:`app.remote.view.RemoteView`) draws its own badge:
    engine, address, model."""
    if remote is not None:
        return remote.badge_html()
    arch = info.architecture or ""
    spec = info.spec
    weights = info.weights or info.dtype
    return (
        "<div class='model-badge'>"
        f"<div class='model-name'>{html.escape(info.name)}</div>"
        f"<div>{fmt_params(info.num_params)} parameters · weights {fmt_bytes(info.weights_bytes)} "
        f"({html.escape(weights)}) on <b>{html.escape(info.device)}</b></div>"
        f"{precision_line(info)}"
        f"<div>{spec.layers} layers · {spec.heads} query heads / {spec.kv_heads} KV heads · head_dim "
        f"{spec.head_dim} · context {fmt_int(info.context_len)} tokens"
        f"{' · ' + html.escape(arch) if arch else ''}</div>"
        f"{_eos_line(info)}</div>")


def _eos_line(info) -> str:
    """The tokens that end generation (EOS set), e.g. ``<|endoftext|> (0), <|im_end|> (2)``."""
    eos = info.eos_tokens or ()
    if not eos:
        return ""
    names = ", ".join(f"{html.escape(str(t))} ({i})" for i, t in eos)
    return f"<div>ends on: {names}</div>"


def kv_formula_html(info, tokens: int | None = None, measured_bytes: int | None = None,
                    bytes_per_token: int | None = None, pool_bytes: int | None = None,
                    prompt_tokens: int = 0, output_tokens: int = 0, remote=None,
                    pool_blocks: tuple[int, int] = (0, 0)) -> str:
    """The KV cache formula written out with this model's numbers, and checked against the cache.

    Args:
        info: ``ModelInfo`` (dtype, dtype_bytes, and the shape in ``info.spec``).
        tokens: tokens in the cache now (``None`` before a request).
        measured_bytes: the measured cache size now.
        bytes_per_token: the engine's own per-token figure when it differs from the plain formula
            (sliding-window models); defaults to the plain formula.
        pool_bytes: the paged KV pool's bytes: adds how many tokens it holds, and how many more
            than in the model's dtype when the KV cache is stored in fewer bytes.
        prompt_tokens, output_tokens: the request's prompt length and N, its output tokens so
            far; when ``tokens`` = prompt + N − 1 a line says why the newest token is not cached.
        remote: a remote engine's view: its ``/metrics`` figures instead.
        pool_blocks: ``(blocks the scheduler hands out, tokens per block)``; where the pool's
            bytes hold more blocks than that, the line says the rest is kept as scratch (the
            compiled decode step's padded rows write there), so the pool panel's block count
            and the tokens here agree.
    """
    if remote is not None:
        return remote.kv_html()
    spec = info.spec
    elem = kv_element_bytes(info)
    per_tok = bytes_per_token or kv_bytes_per_token(spec.layers, spec.kv_heads, spec.head_dim, elem)
    gqa = ""
    if spec.kv_heads != spec.heads:
        gqa = (f" ({spec.heads} query heads share {spec.kv_heads} KV heads: grouped-query attention "
               f"stores {spec.heads // max(1, spec.kv_heads)}× less than one KV head per query head)")
    lines = [
        f"<div class='kv-formula'><b>KV cache bytes</b> = 2 (K and V) × {spec.layers} layers × "
        f"{spec.kv_heads} KV heads × {spec.head_dim} head_dim × {elem} bytes "
        f"({html.escape(kv_dtype_label(info))}) × tokens = <b>{fmt_int(per_tok)} B per token</b>{gqa}.</div>"]
    if pool_bytes:
        fits = pool_bytes // per_tok
        line = f"The {fmt_bytes(pool_bytes)} KV pool holds {fmt_int(fits)} tokens"
        if elem < info.dtype_bytes:
            plain = pool_bytes // kv_bytes_per_token(spec.layers, spec.kv_heads, spec.head_dim,
                                                     info.dtype_bytes)
            line += (f": <b>{fits / plain:.0f}× as many</b> as in {html.escape(info.dtype)} "
                     f"({fmt_int(plain)}), {fmt_int(fits - plain)} more")
        handed, size = pool_blocks
        physical = fits // size if size else 0
        if handed and physical > handed:
            line += (f" = {fmt_int(physical)} blocks of {size}; the scheduler hands out "
                     f"{fmt_int(handed)} of them (the block pool below) and keeps "
                     f"{fmt_int(physical - handed)} as scratch for the compiled decode step's padded rows")
        lines.append(f"<div class='kv-pool'>{line}.</div>")
    if tokens:
        predicted = per_tok * tokens
        check = ""
        if measured_bytes is not None:
            ok = "✓ equal" if measured_bytes == predicted else f"differs by {fmt_int(measured_bytes - predicted)} B"
            check = f" · measured {fmt_int(measured_bytes)} B ({ok})"
        lines.append(f"<div class='kv-now'>Now: {fmt_int(per_tok)} × {fmt_int(tokens)} tokens = "
                     f"{fmt_int(predicted)} B = {fmt_bytes(predicted)}{check}</div>")
        if output_tokens and prompt_tokens and tokens == prompt_tokens + output_tokens - 1:
            lines.append(
                f"<div class='kv-why'>{fmt_int(tokens)} tokens = {fmt_int(prompt_tokens)} prompt + "
                f"(N − 1) = {fmt_int(output_tokens - 1)} output tokens, not N = {fmt_int(output_tokens)}: "
                "a step computes keys and values only for the tokens it is fed, and the newest "
                "token was only just sampled; it enters the cache when the next step takes it "
                "as input.</div>")
    return "".join(lines)


def _count(n: int, noun: str) -> str:
    """``"1 recent request"``, ``"3 recent requests"``: ``n`` and ``noun``, plural past one."""
    return f"{fmt_int(n)} {noun}{'' if n == 1 else 's'}"


def rolling_counts(summary: dict) -> str:
    """``"3 recent requests (all users): 2 finished · 1 stopped · 0 failed"`` of a rolling
    summary (:func:`rolling_table_html`'s argument)."""
    return (f"{_count(summary.get('count', 0), 'recent request')} (all users): "
            f"{fmt_int(summary.get('finished', 0))} finished · {fmt_int(summary.get('aborted', 0))} stopped · "
            f"{fmt_int(summary.get('failed', 0))} failed")


def rolling_coverage(summary: dict) -> str:
    """Which requests the percentiles cover: the finished ones (a stopped or failed request has
    no end-to-end time to rank), and for TPOT only those with two or more output tokens (TPOT is
    undefined below two) when the summary's ``tpot_count`` says fewer."""
    finished = summary.get("finished", 0)
    if not finished:
        return "No finished request yet, so no percentiles."
    if finished == summary.get("count", 0):
        who = "the one finished request" if finished == 1 else f"all {fmt_int(finished)} of them"
    else:
        who = ("the 1 finished request" if finished == 1
               else f"the {fmt_int(finished)} finished requests")
        who += " only"
    line = f"The percentiles cover {who}"
    tpot = summary.get("tpot_count")
    if tpot is not None and tpot < finished:
        line += (f"; TPOT only the {fmt_int(tpot)} with two or more output tokens" if tpot
                 else "; TPOT none of them: it needs two or more output tokens")
    return line + "."


def rolling_table_html(summary: dict | None) -> str:
    """Recent requests: p50 / p90 / p99 of TTFT, TPOT and e2e, and finished/aborted/failed counts.

    Args:
        summary: ``engine.rolling.summary()``: ``{"count", "finished", "aborted", "failed",
            "ttft_s": {"p50", "p90", "p99"}, "tpot_s": {...}, "e2e_s": {...}, "tpot_count"}`` of
            users' requests (the percentiles cover the finished ones, as the footnote says),
            and ``"lessons"`` (the same for lesson runs, counted in a footnote only).
    """
    summary = summary or {}
    rows = []
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end-to-end")):
        pct = summary.get(key) or {}
        cells = "".join(f"<td>{fmt_seconds(pct.get(p)) if pct.get(p) is not None else '–'}</td>"
                        for p in ("p50", "p90", "p99"))
        rows.append(f"<tr><th>{label}</th>{cells}</tr>")
    counts = f"{rolling_counts(summary)}<br>{rolling_coverage(summary)}"
    lessons = summary.get("lessons") or {}
    if lessons.get("count"):
        e2e = (lessons.get("e2e_s") or {}).get("p50")
        counts += (f"<br>{_count(lessons['count'], 'lesson run')} kept apart, not in these percentiles"
                   + (f" (their median end-to-end: {fmt_seconds(e2e)})" if e2e is not None else ""))
    return ("<table class='rolling'><tr><th></th><th>p50</th><th>p90</th><th>p99</th></tr>"
            f"{''.join(rows)}</table><div class='rolling-foot'>{counts}</div>")
