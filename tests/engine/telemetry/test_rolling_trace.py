"""Rolling latency percentiles and the JSON/CSV trace export."""

import csv
import io
import json
import threading

import numpy as np
import pytest

from engine.output.events import Candidate, RequestOutput, StepEvent
from engine.output.metrics import RequestMetrics
from engine.telemetry.estimator import load_spec
from engine.telemetry.memory import MemoryBreakdown, MemoryPart
from engine.telemetry.rolling import RollingStats, percentiles
from engine.telemetry.trace import COLUMNS, trace_rows, trace_to_csv, trace_to_json, write_trace


def _out(reason="stop", ttft=0.1, tpot=0.02, e2e=1.0, tokens=10, rid="r1", memory=None):
    m = RequestMetrics(ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, output_tokens=tokens, prompt_tokens=5)
    return RequestOutput(request_id=rid, prompt_token_ids=[1, 2, 3, 4, 5],
                         token_ids=list(range(tokens)), text="hi", finish_reason=reason,
                         metrics=m, memory=memory)


def test_percentiles_linear_interpolation():
    got = percentiles([1.0, 2.0, 3.0, 4.0])
    assert got == {"p50": 2.5, "p90": pytest.approx(3.7), "p99": pytest.approx(3.97)}
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None}


def test_rolling_counts_and_finished_only_percentiles():
    rs = RollingStats(window=100)
    for i in range(1, 11):
        rs.add(_out("stop" if i % 2 else "length", ttft=i / 10, e2e=float(i), tpot=i / 100))
    rs.add(_out("abort", ttft=99.0, e2e=99.0))
    rs.add(_out("error", ttft=99.0, e2e=99.0))
    rs.add(_out("stop", ttft=0.5, tpot=0.0, tokens=1, e2e=5.5))  # one token: no TPOT
    s = rs.summary()
    assert (s["count"], s["finished"], s["aborted"], s["failed"]) == (13, 11, 1, 1)
    ttfts = [i / 10 for i in range(1, 11)] + [0.5]
    assert s["ttft_s"]["p90"] == pytest.approx(float(np.percentile(ttfts, 90)))
    assert s["e2e_s"]["p99"] < 99  # aborted/failed requests are excluded
    assert s["tpot_s"]["p50"] == pytest.approx(float(np.percentile([i / 100 for i in range(1, 11)], 50)))


def test_rolling_window_drops_oldest_and_empty_summary():
    rs = RollingStats(window=3)
    assert rs.summary()["ttft_s"]["p50"] is None and rs.summary()["count"] == 0
    for t in (10.0, 1.0, 2.0, 3.0):
        rs.add(_out(ttft=t))
    s = rs.summary()
    assert s["count"] == 3 and s["ttft_s"]["p99"] == pytest.approx(2.98)
    with pytest.raises(ValueError):
        RollingStats(window=0)


def test_rolling_is_thread_safe():
    rs = RollingStats(window=10_000)
    threads = [threading.Thread(target=lambda: [rs.add(_out()) for _ in range(500)])
               for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(50):
        rs.summary()
    for t in threads:
        t.join()
    assert rs.summary()["count"] == 2000


def _events():
    cands = [Candidate(5, "Hel", 0.9, -0.105), Candidate(6, "x", 0.0, float("-inf"))]
    evs = [StepEvent("r,1", "prefill", 0, 5, "Hel", "Hel", 0.9, cands, 100.0, 100.5, 8, 8,
                     8 * 46_080)]
    for i in range(1, 4):
        evs.append(StepEvent("r,1", "decode", i, 7, "lo", "lo", 0.5, [], 100.5 + i * 0.1,
                             100.55 + i * 0.1, 1, 8 + i, (8 + i) * 46_080))
    return evs


def test_trace_rows_relative_times_and_formula():
    rows = trace_rows(_events(), load_spec("smollm2-135m"), 4)
    assert len(rows) == 4 and list(rows[0]) == COLUMNS
    assert rows[0]["t_start_rel_s"] == 0 and rows[0]["duration_s"] == pytest.approx(0.5)
    assert rows[3]["t_end_rel_s"] == pytest.approx(0.85)
    assert all(r["kv_bytes_formula"] == r["kv_bytes"] for r in rows)
    assert trace_rows(_events())[0]["kv_bytes_formula"] is None
    assert trace_rows([]) == []


def test_trace_json_and_csv_round_trip(tmp_path):
    mem = MemoryBreakdown("cpu", [MemoryPart("weights", 10, True)], 10, "process RSS", 1.0)
    out, evs, spec = _out(rid="r,1", memory=mem), _events(), load_spec("smollm2-135m")
    doc = json.loads(trace_to_json(out, evs, spec, 4))  # strict JSON: no -Infinity
    assert doc["request_id"] == "r,1" and doc["metrics"]["ttft_s"] == 0.1
    assert doc["memory"]["parts"][0]["bytes"] == 10
    assert doc["model"]["kv_bytes_per_token"] == 46_080
    assert doc["steps"][0]["top_candidates"][1]["logprob"] is None
    assert [s["phase"] for s in doc["steps"]] == ["prefill", "decode", "decode", "decode"]
    rows = list(csv.DictReader(io.StringIO(trace_to_csv(evs))))
    assert len(rows) == 4 and rows[0]["request_id"] == "r,1" and rows[2]["kv_tokens"] == "10"
    jpath, cpath = write_trace(tmp_path / "traces", out, evs, spec, 4)
    assert jpath.name == "trace_r_1.json" and cpath.suffix == ".csv"
    assert json.loads(jpath.read_text())["steps"][3]["kv_bytes"] == 11 * 46_080
    assert cpath.read_text().splitlines()[0] == ",".join(COLUMNS)
