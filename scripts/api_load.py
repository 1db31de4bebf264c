"""A small bounded load test of an OpenAI-compatible server: Poisson arrivals at a few request
rates, every request streamed, timed on the client.

For each rate, ``--requests`` requests arrive with exponential gaps of mean 1/rate seconds; each
is a streamed ``/v1/completions`` with a fixed prompt and ``max_tokens`` (``ignore_eos``, so every
answer has the same length on our server and vLLM). Per rate it reports the median and p90 of
TTFT (first content chunk − send), ITL (gaps between content chunks) and e2e, and the output
throughput (output tokens of all requests / (last answer's end − first request's send)). When the
server exports our Prometheus names, the server's own mean TTFT and ITL over the same requests
(histogram sum / count, before and after) are reported beside the client's.

Usage::

    python scripts/api_load.py --base-url http://127.0.0.1:8000/v1 --rates 0.5 1 2 4 \
        --requests 16 --max-tokens 64 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

import httpx
import numpy as np

PROMPT = ("Explain, in a few short paragraphs, how a large language model turns a prompt into an "
          "answer: tokenization, the prefill pass over the prompt, then decoding one token at a time.")


async def one(client: httpx.AsyncClient, url: str, body: dict, headers: dict) -> dict:
    """One streamed request: send time, chunk arrival times, output tokens (from ``usage``)."""
    sent = time.perf_counter()
    times, tokens, error = [], None, None
    async with client.stream("POST", url, json=body, headers=headers) as r:
        if r.status_code != 200:
            error = f"HTTP {r.status_code}"
        else:
            async for line in r.aiter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                obj = json.loads(line[5:])
                if obj.get("usage"):
                    tokens = obj["usage"].get("completion_tokens")
                if any(c.get("text") for c in obj.get("choices") or []):
                    times.append(time.perf_counter())
    return {"sent": sent, "times": times, "tokens": tokens, "error": error,
            "end": time.perf_counter()}


def server_means(base_url: str, headers: dict) -> dict | None:
    """Sums and counts of the server's TTFT and ITL histograms (our names), or ``None``."""
    root = base_url.rstrip("/")
    root = root[:-3] if root.endswith("/v1") else root
    try:
        text = httpx.get(root + "/metrics", headers=headers, timeout=10).text
    except httpx.HTTPError:
        return None
    out = {}
    for line in text.splitlines():
        for key in ("time_to_first_token_seconds", "inter_token_latency_seconds"):
            for part in ("sum", "count"):
                if line.startswith(f"playground_{key}_{part}"):
                    out[f"{key}_{part}"] = float(line.rsplit(" ", 1)[1])
    return out if len(out) == 4 else None


def pct(values, q):
    return float(np.percentile(values, q)) if values else None


async def run_rate(base_url: str, model: str, rate: float, n: int, max_tokens: int,
                   headers: dict, seed: int) -> dict:
    """Send ``n`` requests at ``rate`` per second (Poisson); returns the rate's figures."""
    rng = random.Random(seed)
    body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0.8,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    url = base_url.rstrip("/") + "/completions"
    before = server_means(base_url, headers)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=600.0),
                                 limits=httpx.Limits(max_connections=n + 4)) as client:
        tasks = []
        for i in range(n):
            tasks.append(asyncio.create_task(one(client, url, body, headers)))
            if i < n - 1:
                await asyncio.sleep(rng.expovariate(rate))
        results = await asyncio.gather(*tasks)
    ok = [r for r in results if not r["error"] and r["times"]]
    ttft = [r["times"][0] - r["sent"] for r in ok]
    itl = [b - a for r in ok for a, b in zip(r["times"], r["times"][1:])]
    e2e = [r["end"] - r["sent"] for r in ok]
    out_tokens = sum(r["tokens"] or len(r["times"]) for r in ok)
    span = max(r["end"] for r in ok) - min(r["sent"] for r in ok) if ok else 0.0
    after = server_means(base_url, headers)
    server = {}
    if before and after:
        for key, name in (("time_to_first_token_seconds", "server_ttft_mean_s"),
                          ("inter_token_latency_seconds", "server_itl_mean_s")):
            count = after[key + "_count"] - before[key + "_count"]
            server[name] = (after[key + "_sum"] - before[key + "_sum"]) / count if count else None
    return {"rate_per_s": rate, "requests": n, "ok": len(ok), "errors": n - len(ok),
            "ttft_p50_s": pct(ttft, 50), "ttft_p90_s": pct(ttft, 90),
            "itl_p50_s": pct(itl, 50), "itl_p90_s": pct(itl, 90),
            "ttft_mean_s": float(np.mean(ttft)) if ttft else None,
            "itl_mean_s": float(np.mean(itl)) if itl else None, **server,
            "e2e_p50_s": pct(e2e, 50), "output_tokens": out_tokens,
            "output_tokens_per_s": out_tokens / span if span else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--api-key")
    p.add_argument("--rates", type=float, nargs="+", default=[0.5, 1, 2, 4])
    p.add_argument("--requests", type=int, default=16, help="requests per rate")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    rows = []
    for k, rate in enumerate(args.rates):
        row = asyncio.run(run_rate(args.base_url, args.model, rate, args.requests,
                                   args.max_tokens, headers, seed=k))
        rows.append(row)
        print(f"rate {rate:g}/s: {row['ok']}/{row['requests']} ok · TTFT p50 "
              f"{row['ttft_p50_s'] * 1000:.0f} ms p90 {row['ttft_p90_s'] * 1000:.0f} ms · ITL p50 "
              f"{row['itl_p50_s'] * 1000:.0f} ms p90 {row['itl_p90_s'] * 1000:.0f} ms · "
              f"{row['output_tokens_per_s']:.1f} output tok/s", flush=True)
        if row.get("server_itl_mean_s"):
            print(f"    means, client vs server: TTFT {row['ttft_mean_s'] * 1000:.0f} vs "
                  f"{row['server_ttft_mean_s'] * 1000:.0f} ms · ITL {row['itl_mean_s'] * 1000:.0f} "
                  f"vs {row['server_itl_mean_s'] * 1000:.0f} ms", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"base_url": args.base_url, "model": args.model,
                       "max_tokens": args.max_tokens, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
