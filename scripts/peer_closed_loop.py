"""A closed-loop load client for OpenAI-compatible servers, run against several servers in turns.

``C`` concurrent clients each send ``--requests-per-client`` requests one after the other: a
streamed ``/v1/completions`` of a fixed prompt (about 50 tokens), ``temperature=0``,
``max_tokens`` tokens with ``ignore_eos`` (so every server generates the same number of tokens).
For each server and each ``C`` it reports the output throughput (completion tokens of all
requests / wall time of the round) and the median TTFT (first content chunk − send). With
``--prompt-tokens N`` every request's prompt is about ``N`` tokens long instead (a passage
repeated, cut to ``N`` tokens by ``--tokenizer``'s count), each starting with a request number of
its own so no prefix cache serves one request from another; then it also reports TTFT p99 and
prefill tokens per second (the prompt's tokens ÷ its TTFT, median over the requests). The servers
are measured in alternating turns (server A at C, server B at C, ... then again), ``--rounds``
times, and medians are reported, so a machine whose speed drifts affects all servers alike.

Usage::

    python scripts/peer_closed_loop.py --server vllm=http://127.0.0.1:8101/v1 \
        --server int4=http://127.0.0.1:8102/v1 --concurrency 1 8 32 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import httpx

PROMPT = ("Here is a short passage about the weather in spring, the rivers that fill with rain and "
          "the farmers who watch the sky before they plant. Continue the passage in the same "
          "calm voice, describing the next few days in the valley.")


def long_prompt(tokens: int, tokenizer: str, number: int) -> str:
    """About ``tokens`` tokens (by ``tokenizer``'s count, a transformers tokenizer folder or id):
    ``"Request <number>."`` then :data:`PROMPT` repeated and cut to that length."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer)
    head = f"Request {number}. "
    body = tok.encode(PROMPT + " ", add_special_tokens=False)
    need = max(1, tokens - len(tok.encode(head, add_special_tokens=False)))
    ids = body * (need // len(body) + 2)
    n = need
    while True:  # decoding and encoding again merges a few tokens: lengthen until it holds enough
        text = head + tok.decode(ids[:n])
        short = tokens - len(tok.encode(text, add_special_tokens=False))
        if short <= 0 or n >= len(ids):
            return text
        n += short


_PROMPTS: dict = {}


def prompt_for(i: int, tokens: int | None, tokenizer: str | None) -> str:
    """Request ``i``'s prompt: :data:`PROMPT`, or a :func:`long_prompt` of its own."""
    if not tokens:
        return PROMPT
    if (i, tokens) not in _PROMPTS:
        _PROMPTS[(i, tokens)] = long_prompt(tokens, tokenizer, i)
    return _PROMPTS[(i, tokens)]


async def one(client: httpx.AsyncClient, url: str, model: str, max_tokens: int, prompt: str = PROMPT) -> dict:
    """One streamed completion: TTFT (s), completion and prompt tokens (from ``usage``), error."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    first, tokens, prompt_tokens = None, 0, 0
    async with client.stream("POST", f"{url}/completions", json=body) as r:
        if r.status_code != 200:
            return {"error": f"HTTP {r.status_code}", "ttft_s": None, "tokens": 0, "prompt_tokens": 0}
        async for line in r.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            obj = json.loads(line[5:])
            if obj.get("usage"):
                tokens = obj["usage"].get("completion_tokens") or 0
                prompt_tokens = obj["usage"].get("prompt_tokens") or 0
            if first is None and any(c.get("text") for c in obj.get("choices") or []):
                first = time.perf_counter()
    return {"error": None, "ttft_s": None if first is None else first - sent, "tokens": tokens,
            "prompt_tokens": prompt_tokens}


async def model_name(client: httpx.AsyncClient, url: str) -> str:
    """The first model the server lists."""
    r = await client.get(f"{url}/models")
    r.raise_for_status()
    return r.json()["data"][0]["id"]


_COUNTER = [0]


def percentile(xs: list[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of ``xs``, nearest rank; ``None`` for none."""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * len(xs) + 0.5)) - 1))]


async def round_at(url: str, c: int, per_client: int, max_tokens: int, prompt_tokens: int | None = None,
                   tokenizer: str | None = None) -> dict:
    """``c`` clients × ``per_client`` requests in turn; throughput and TTFT of the round (and
    TTFT p99 and prefill tok/s with ``prompt_tokens``: each request a long prompt of its own)."""
    limits = httpx.Limits(max_connections=c + 2)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        model = await model_name(client, url)

        def next_prompt() -> str:
            _COUNTER[0] += 1
            return prompt_for(_COUNTER[0], prompt_tokens, tokenizer)

        async def worker():
            return [await one(client, url, model, max_tokens, next_prompt()) for _ in range(per_client)]

        start = time.perf_counter()
        results = [r for rs in await asyncio.gather(*(worker() for _ in range(c))) for r in rs]
        wall = time.perf_counter() - start
    ok = [r for r in results if not r["error"]]
    ttfts = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    return {"wall_s": wall, "tokens": sum(r["tokens"] for r in ok),
            "errors": len(results) - len(ok),
            "output_tokens_per_s": sum(r["tokens"] for r in ok) / wall,
            "ttft_p50_s": statistics.median(ttfts) if ttfts else None,
            "ttft_p99_s": percentile(ttfts, 0.99),
            "prompt_tokens": statistics.median(r["prompt_tokens"] for r in ok) if ok else 0,
            "prefill_tokens_per_s": statistics.median(r["prompt_tokens"] / r["ttft_s"] for r in ok
                                                      if r["ttft_s"]) if ttfts else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", action="append", required=True, metavar="NAME=URL",
                    help="a server's name and /v1 base URL (repeat)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="alternating turns per C (median)")
    ap.add_argument("--prompt-tokens", type=int, help="a long prompt of about this many tokens, "
                    "a different one per request (default: the ~50-token passage)")
    ap.add_argument("--tokenizer", help="the tokenizer (folder or id) that counts --prompt-tokens")
    ap.add_argument("--json", help="write every round's figures here")
    args = ap.parse_args(argv)
    if args.prompt_tokens and not args.tokenizer:
        ap.error("--prompt-tokens needs --tokenizer")
    servers = dict(s.split("=", 1) for s in args.server)
    rows = {}
    for c in args.concurrency:
        for rnd in range(args.rounds):
            for name, url in servers.items():
                r = asyncio.run(round_at(url.rstrip("/"), c, args.requests_per_client,
                                         args.max_tokens, args.prompt_tokens, args.tokenizer))
                rows.setdefault((name, c), []).append(r)
                print(f"C={c} round {rnd + 1} {name}: {r['output_tokens_per_s']:.1f} tok/s, "
                      f"TTFT p50 {1000 * (r['ttft_p50_s'] or 0):.0f} ms, errors {r['errors']}",
                      file=sys.stderr, flush=True)
    first = next(iter(servers))
    if args.prompt_tokens:
        print(f"Prompts of about {args.prompt_tokens} tokens, {args.max_tokens} new tokens each.\n")
    print("| C | " + " | ".join(servers) + " |")
    print("| --- |" + " --- |" * len(servers))
    summary = {}
    for c in args.concurrency:
        cells = []
        base = statistics.median(r["output_tokens_per_s"] for r in rows[(first, c)])
        for name in servers:
            tps = statistics.median(r["output_tokens_per_s"] for r in rows[(name, c)])
            ttft = statistics.median(r["ttft_p50_s"] or 0 for r in rows[(name, c)])
            summary[f"{name}@{c}"] = {"output_tokens_per_s": tps, "ttft_p50_s": ttft}
            ratio = "" if name == first else f" ({tps / base:.2f}x)"
            cell = f"{tps:.1f} tok/s{ratio}, TTFT {1000 * ttft:.0f} ms"
            if args.prompt_tokens:
                p99 = statistics.median(r["ttft_p99_s"] or 0 for r in rows[(name, c)])
                pre = statistics.median(r["prefill_tokens_per_s"] or 0 for r in rows[(name, c)])
                base_ttft = statistics.median(r["ttft_p50_s"] or 0 for r in rows[(first, c)])
                summary[f"{name}@{c}"].update(ttft_p99_s=p99, prefill_tokens_per_s=pre)
                vs = "" if name == first or not base_ttft else f" ({ttft / base_ttft:.2f}x)"
                cell = (f"{tps:.1f} tok/s{ratio}, TTFT p50 {ttft:.2f} s{vs}, p99 {p99:.2f} s, "
                        f"prefill {pre:.0f} tok/s")
            cells.append(cell)
        print(f"| {c} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"servers": servers, "summary": summary,
                       "rounds": {f"{n}@{c}": v for (n, c), v in rows.items()},
                       "args": vars(args)}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
