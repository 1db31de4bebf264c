"""Time to full speed on a fresh machine: ``engine serve`` started with an empty cache folder.

Starts ``python -m engine serve`` on 127.0.0.1 with ``LLM_PLAYGROUND_CACHE`` pointing at a new,
empty folder (no dequantized weights, no inductor kernels: what a Hugging Face Space sees after
each restart), then, from the moment it was launched:

- polls ``/health`` until the server answers (``up_s``);
- sends one greedy streaming completion after another (a fixed prompt, ``--tokens`` new tokens,
  end-of-text ignored), each timed from its request to its last token: TTFT, and decode tokens
  per second ``(tokens − 1) ÷ (last token − first token)``;
- reads ``/metrics`` between requests for the decode step's compiled buckets
  (``playground_decode_bucket_compiled``).

It reports the seconds from launch to the first answer's last token (``first_answer_s``), to
bucket 1's compiled graph (``bucket1_s``), to every bucket (``all_buckets_s``), what the answers
served meanwhile saw (``while_compiling``: how many, their tokens, the longest and the median
answer's seconds), and every request on the way (when it ended, its decode tok/s, its seconds
and the buckets ready), then stops the server. Usage::

    .venv/bin/python scripts/cold_start.py --json assets/bench/cold-start.json

One run on a machine that is otherwise quiet; compile time is CPU-bound, so other load
lengthens it in proportion.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

PROMPT = "Explain in a few sentences why a language model generates one token at a time."
BUCKET = re.compile(r'^playground_decode_bucket_compiled\{[^}]*bucket="(\d+)"[^}]*\} ([\d.]+)', re.M)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def buckets(base: str) -> dict[int, bool]:
    """``{bucket: compiled}`` from the server's ``/metrics`` (empty when it has no compiled
    step, or did not answer)."""
    try:
        text = httpx.get(f"{base}/metrics", timeout=10).text
    except httpx.HTTPError:
        return {}
    return {int(b): float(v) > 0 for b, v in BUCKET.findall(text)}


def one_answer(base: str, tokens: int) -> dict:
    """One streaming greedy completion of :data:`PROMPT`: ``ttft_s``, ``tokens``,
    ``decode_tokens_per_s`` (tokens after the first ÷ seconds from the first to the last) and
    ``took_s`` (from the request to its last token)."""
    body = {"model": "smollm2-135m", "prompt": PROMPT, "max_tokens": tokens, "temperature": 0,
            "stream": True, "ignore_eos": True}
    t0 = time.perf_counter()
    stamps = []
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                if json.loads(line[6:])["choices"][0].get("text"):
                    stamps.append(time.perf_counter())
    n = len(stamps)
    rate = (n - 1) / (stamps[-1] - stamps[0]) if n > 1 and stamps[-1] > stamps[0] else 0.0
    return {"ttft_s": round(stamps[0] - t0, 3) if stamps else None, "tokens": n,
            "decode_tokens_per_s": round(rate, 1),
            "took_s": round(stamps[-1] - t0, 2) if stamps else None}


def while_compiling(out: dict) -> dict:
    """What the answers served before every bucket was compiled saw: how many, their tokens, the
    longest (seconds from request to last token) and the median of their ``took_s``."""
    end = out.get("all_buckets_s", float("inf"))
    took = sorted(a["took_s"] for a in out["answers"] if a["at_s"] <= end and a.get("took_s"))
    return {"answers": len(took), "tokens": sum(a["tokens"] for a in out["answers"] if a["at_s"] <= end),
            "longest_s": took[-1] if took else None, "median_s": took[len(took) // 2] if took else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", default="auto", help="engine serve --weights (default auto: int4 on CPU)")
    p.add_argument("--tokens", type=int, default=48, help="new tokens per answer (default 48)")
    p.add_argument("--limit", type=float, default=600.0, help="give up after this many seconds (default 600)")
    p.add_argument("--after", type=int, default=3, help="answers to time once every bucket is ready (default 3)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--prepared", action="store_true",
                   help="run `python -m engine prepare` into the new cache first, untimed: the "
                        "engine's kernels and the model's config, no compiled graphs (the Docker "
                        "image carries these and the graphs too)")
    args = p.parse_args(argv)

    cache = tempfile.mkdtemp(prefix="cold-start-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env.update(LLM_PLAYGROUND_CACHE=cache, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if args.prepared:
        subprocess.run([sys.executable, "-m", "engine", "prepare"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    cmd = [sys.executable, "-m", "engine", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--weights", args.weights]
    t0 = time.perf_counter()
    log = open(Path(cache) / "serve.log", "w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    out: dict = {"command": " ".join(cmd[1:]), "cache": "prepared" if args.prepared else "empty",
                 "tokens": args.tokens, "answers": []}
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"the server exited with {server.returncode}; see {log.name}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        out["up_s"] = round(time.perf_counter() - t0, 1)
        print(f"up after {out['up_s']} s", flush=True)
        seen: dict[int, float] = {}   # bucket -> seconds from launch when /metrics first said compiled
        done = threading.Event()

        def watch():  # every half second, so the compile times do not wait for an answer's end
            while not done.wait(0.5):
                for b, ok in buckets(base).items():
                    if ok and b not in seen:
                        seen[b] = round(time.perf_counter() - t0, 1)

        threading.Thread(target=watch, daemon=True).start()
        after = 0
        while time.perf_counter() - t0 < args.limit:
            answer = one_answer(base, args.tokens)
            now = time.perf_counter() - t0
            ready = buckets(base)
            answer.update(at_s=round(now, 1), buckets_ready=sorted(b for b, ok in ready.items() if ok),
                          buckets=sorted(ready))
            out["answers"].append(answer)
            out.setdefault("first_answer_s", answer["at_s"])
            if ready and all(ready.values()) and "all_buckets_s" not in out:
                out["all_buckets_s"] = max(seen.get(b, answer["at_s"]) for b in ready)
            print(f"{now:6.1f} s: {answer['decode_tokens_per_s']:6.1f} tok/s decode, TTFT "
                  f"{answer['ttft_s']} s, buckets ready {answer['buckets_ready']}", flush=True)
            if "all_buckets_s" in out:
                after += 1
                if after >= args.after:
                    break
        done.set()
        out["bucket_ready_s"] = {str(b): t for b, t in sorted(seen.items())}
        if 1 in seen:
            out["bucket1_s"] = seen[1]
        out["while_compiling"] = while_compiling(out)
        try:
            from engine.experiments.machine import describe

            out["machine"] = describe()
        except Exception:  # noqa: BLE001 - the figures stand without it
            pass
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    print({k: out.get(k) for k in ("up_s", "first_answer_s", "bucket1_s", "all_buckets_s", "while_compiling")})
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
