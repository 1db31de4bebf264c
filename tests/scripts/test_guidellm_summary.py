"""The guidellm report summary (scripts/guidellm_summary.py) reads guidellm 0.8's JSON schema and
computes throughput as output tokens / duration; the tokenizer folder it is given exists."""

from __future__ import annotations

import importlib.util
from tests.support.paths import REPO

SCRIPT = REPO / "scripts" / "guidellm_summary.py"


def _module():
    spec = importlib.util.spec_from_file_location("guidellm_summary", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bench(rate, ok, errored, ttft, itl, tokens, duration):
    dist = lambda median, p90: {"median": median, "percentiles": {"p90": p90}}  # noqa: E731
    return {"config": {"strategy": {"type_": "constant", "rate": rate}}, "duration": duration,
            "metrics": {"request_totals": {"successful": ok, "errored": errored},
                        "time_to_first_token_ms": {"successful": dist(*ttft)},
                        "inter_token_latency_ms": {"successful": dist(*itl)},
                        "output_token_count": {"successful": {"total_sum": tokens}}}}


def test_rows_and_table_from_a_report():
    mod = _module()
    doc = {"benchmarks": [_bench(0.5, 16, 0, (120.0, 180.0), (40.0, 55.0), 1024, 32.0),
                          _bench(2.0, 15, 1, (900.0, 1500.0), (95.0, 130.0), 960, 12.0)]}
    rows = mod.rows(doc)
    assert [r["rate"] for r in rows] == [0.5, 2.0]
    assert rows[0]["output_tokens_per_s"] == 32.0 and rows[1]["output_tokens_per_s"] == 80.0
    text = mod.table(rows)
    assert "| 0.5 | 16 | 120 / 180 | 40 / 55 | 32.0 |" in text
    assert "| 2 | 15 (1 errors) | 900 / 1500 | 95 / 130 | 80.0 |" in text


def test_embedded_config_folder_has_the_tokenizer():
    from engine.model.embedded import embedded_config_folder

    folder = embedded_config_folder("smollm2-135m")
    assert (folder / "config.json").exists() and (folder / "tokenizer.json").exists()


def test_embedded_config_folder_refuses_other_names():
    import pytest

    from engine.model.embedded import ModelLoadError, embedded_config_folder

    with pytest.raises(ModelLoadError, match="not an embedded model"):
        embedded_config_folder("gpt2")
