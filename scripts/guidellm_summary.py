"""One Markdown table from a guidellm ``benchmarks.json``: per benchmark (one request rate),
the requests completed, TTFT and ITL (median and p90, milliseconds, measured by guidellm on the
client) and the output throughput (output tokens of the completed requests / the benchmark's
duration, tokens/s).

Usage: ``python scripts/guidellm_summary.py benchmarks.json``
"""

from __future__ import annotations

import json
import sys


def rows(doc: dict) -> list[dict]:
    """One dict per benchmark of a guidellm report (schema of guidellm 0.8)."""
    out = []
    for b in doc["benchmarks"]:
        m, strategy = b["metrics"], b["config"]["strategy"]
        ttft = m["time_to_first_token_ms"]["successful"]
        itl = m["inter_token_latency_ms"]["successful"]
        tokens = m["output_token_count"]["successful"]["total_sum"]
        out.append({
            "strategy": strategy.get("type_"),
            "rate": strategy.get("rate"),
            "completed": m["request_totals"]["successful"],
            "errored": m["request_totals"]["errored"],
            "ttft_ms_median": ttft["median"], "ttft_ms_p90": ttft["percentiles"]["p90"],
            "itl_ms_median": itl["median"], "itl_ms_p90": itl["percentiles"]["p90"],
            "output_tokens_per_s": tokens / b["duration"] if b["duration"] else 0.0,
        })
    return out


def table(items: list[dict]) -> str:
    """The rows as a Markdown table."""
    lines = ["| rate (req/s) | completed | TTFT median / p90 (ms) | ITL median / p90 (ms) | output tok/s |",
             "| --- | --- | --- | --- | --- |"]
    for r in items:
        rate = f"{r['rate']:g}" if r["rate"] else r["strategy"]
        done = f"{r['completed']}" + (f" ({r['errored']} errors)" if r["errored"] else "")
        lines.append(f"| {rate} | {done} | {r['ttft_ms_median']:.0f} / {r['ttft_ms_p90']:.0f} | "
                     f"{r['itl_ms_median']:.0f} / {r['itl_ms_p90']:.0f} | "
                     f"{r['output_tokens_per_s']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/guidellm_summary.py benchmarks.json")
    with open(sys.argv[1], encoding="utf-8") as f:
        print(table(rows(json.load(f))))
