"""Export a request's step-by-step trace as JSON and CSV (one row per step) for analysis."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

from engine.output.events import RequestOutput, StepEvent
from engine.model.model_spec import ModelSpec

COLUMNS = ["request_id", "phase", "step", "token_id", "token_text", "token_prob", "start_s",
           "end_s", "duration_s", "t_start_rel_s", "t_end_rel_s", "num_tokens", "kv_tokens",
           "kv_bytes", "kv_bytes_formula", "batch_size", "index", "kv_tokens_logical",
           "kv_tokens_physical"]


def trace_rows(events: list[StepEvent], spec: ModelSpec | None = None,
               dtype_bytes: float | None = None) -> list[dict]:
    """One flat dict per step, keys :data:`COLUMNS`.

    ``start_s``/``end_s`` are the events' ``perf_counter()`` seconds; ``t_*_rel_s`` are relative
    to the first event's start. ``kv_bytes_formula`` is the KV formula for ``kv_tokens`` of one
    sequence (``None`` without ``spec`` and ``dtype_bytes``), beside the measured ``kv_bytes``.
    ``index`` is the sample's index; with beam search ``kv_tokens_logical`` is what the live
    beams would hold as independent sequences and ``kv_tokens_physical`` the slots of the
    distinct blocks they hold (``None`` for other requests).
    """
    t0 = events[0].start_s if events else 0.0
    rows = []
    for ev in events:
        formula = None
        if spec is not None and dtype_bytes is not None:
            formula = spec.kv_cache_bytes(ev.kv_tokens, dtype_bytes, 1)
        rows.append({
            "request_id": ev.request_id, "phase": ev.phase, "step": ev.step,
            "token_id": ev.token_id, "token_text": ev.token_text, "token_prob": ev.token_prob,
            "start_s": ev.start_s, "end_s": ev.end_s, "duration_s": ev.end_s - ev.start_s,
            "t_start_rel_s": ev.start_s - t0, "t_end_rel_s": ev.end_s - t0,
            "num_tokens": ev.num_tokens, "kv_tokens": ev.kv_tokens, "kv_bytes": ev.kv_bytes,
            "kv_bytes_formula": formula, "batch_size": ev.batch_size, "index": ev.index,
            "kv_tokens_logical": ev.beams.get("logical_tokens") if ev.beams else None,
            "kv_tokens_physical": ev.beams.get("physical_tokens") if ev.beams else None,
        })
    return rows


def trace_to_json(output: RequestOutput | None, events: list[StepEvent],
                  spec: ModelSpec | None = None, dtype_bytes: float | None = None) -> str:
    """The request (ids, text, finish reason, metrics, final memory breakdown), the model's KV
    formula when ``spec``/``dtype_bytes`` are given, and ``steps``: :func:`trace_rows` rows plus
    each step's top candidates (a ``-inf`` logprob becomes ``null``). Returns a JSON string (bytes, seconds)."""
    rows = trace_rows(events, spec, dtype_bytes)
    for row, ev in zip(rows, events):
        row["top_candidates"] = [
            {"token_id": c.token_id, "text": c.text, "prob": c.prob,
             "logprob": c.logprob if math.isfinite(c.logprob) else None}
            for c in ev.top_candidates]
    doc: dict = {}
    if output is not None:
        mem = output.memory
        doc.update({
            "request_id": output.request_id, "prompt_token_ids": output.prompt_token_ids,
            "token_ids": output.token_ids, "text": output.text,
            "finish_reason": output.finish_reason, "error": output.error,
            "metrics": output.metrics.to_dict(), "kv_cache_bytes": output.kv_cache_bytes,
            "memory": mem.to_dict() if hasattr(mem, "to_dict") else None,
        })
    if spec is not None and dtype_bytes is not None:
        doc["model"] = {"name": spec.name, "layers": spec.layers, "kv_heads": spec.kv_heads,
                        "head_dim": spec.head_dim, "dtype_bytes": dtype_bytes,
                        "kv_bytes_per_token": spec.kv_bytes_per_token(dtype_bytes),
                        "kv_formula": spec.formula_text(dtype_bytes)}
    doc["steps"] = rows
    return json.dumps(doc, indent=1, allow_nan=True, default=str)


def trace_to_csv(events: list[StepEvent], spec: ModelSpec | None = None,
                 dtype_bytes: float | None = None) -> str:
    """The :func:`trace_rows` rows as CSV text with a header line (columns :data:`COLUMNS`)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(trace_rows(events, spec, dtype_bytes))
    return buf.getvalue()


def write_trace(directory, output: RequestOutput | None, events: list[StepEvent],
                spec: ModelSpec | None = None, dtype_bytes: float | None = None) -> tuple[Path, Path]:
    """Write ``trace_<request_id>.json`` and ``.csv`` into ``directory`` (created if missing).

    Returns:
        (json path, csv path).
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    rid = output.request_id if output is not None else (events[0].request_id if events else "empty")
    stem = "trace_" + (re.sub(r"[^A-Za-z0-9_.-]", "_", str(rid)) or "request")
    json_path, csv_path = folder / f"{stem}.json", folder / f"{stem}.csv"
    json_path.write_text(trace_to_json(output, events, spec, dtype_bytes), encoding="utf-8")
    csv_path.write_text(trace_to_csv(events, spec, dtype_bytes), encoding="utf-8")
    return json_path, csv_path
