"""A/B of the decode step's attention and thread settings, in turns, in one process.

    .venv/bin/python scripts/bench_decode_ab.py [--weights int4] [--batches 1 8 32]
        [--tokens 64] [--rounds 3] [--json assets/bench/decode-ab/int4.json]

One engine (compiled decode step, every bucket compiled first) serves every configuration; the
configurations take turns at each batch size (A B C A B C ...), and the median decode tokens/s
of each is reported with its ratio to the first:

- ``kernel, 2 threads``: the paged attention kernel, and buckets above ``FEW_ROWS`` rows on all
  of the engine thread's threads (the shipped settings);
- ``kernel, all threads``: every decode step on all threads, batch 1 included;
- ``kernel, 1 thread``: the same kernel, every decode step on ``decode_threads`` (1 for int4);
- ``sdpa, 1 thread``: attention as one SDPA call per sequence after gathering its blocks (the
  kernel switched off), every decode step on ``decode_threads`` (the previous settings).

Thread counts: each (bucket, thread count) is a graph of its own, and switching between
thread configurations in one process ran into Dynamo's recompile limit (8), after which the
turns measured the eager fallback. Compare thread settings in separate processes, one
``--configs`` each, taking turns (the buckets then compile under that configuration's
threads); attention settings can share a process.

Decode tokens/s of a turn: ``B`` greedy requests of ``--tokens`` tokens (``ignore_eos``), all
output tokens but the first of each, over the span from the last first token to the last token
(the span where all ``B`` decode together), as ``python -m engine bench compile`` counts them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = ["kernel, 2 threads", "kernel, all threads", "kernel, 1 thread", "sdpa, 1 thread"]
STORY = "Write a long story about a lighthouse keeper and the ships she guides at night."


def configure(name: str, engine=None) -> None:
    """Switch the process to one configuration (the kernel's module state and the runner's
    ``few_rows``, both read per step)."""
    from engine.worker.kernels import decode_attention as kernel

    kernel.unavailable_reason()                      # builds and loads the library once
    lib = configure.lib = getattr(configure, "lib", kernel._state.get("lib"))
    kernel._state.clear()
    kernel._state.update({"lib": lib} if name.startswith("kernel") else {"error": "A/B: off"})
    few = {"kernel, 2 threads": 2, "kernel, all threads": 0}.get(name, 10**6)
    if engine is not None:
        engine.call(lambda runner: setattr(runner, "few_rows", few)).result()


def decode_rate(engine, batch: int, tokens: int) -> float:
    """Decode tokens/s of ``batch`` concurrent greedy requests (see the module docstring)."""
    from engine.params import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    sent = time.perf_counter()
    handles = [engine.submit(f"{STORY} (part {i})", params) for i in range(batch)]
    outs = [h.result(1800) for h in handles]
    start = sent + max(o.metrics.ttft_s for o in outs)
    end = sent + max(o.metrics.e2e_s for o in outs)
    return (sum(len(o.token_ids) for o in outs) - batch) / max(end - start, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", default="int4")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=CONFIGS, choices=CONFIGS)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    from engine import LLMEngine, load_model

    configs = args.configs
    configure(configs[0])      # the buckets compile under the first configuration's threads
    loaded = load_model("smollm2-135m", weights=args.weights)
    engine = LLMEngine(loaded, compile="on", telemetry=False, enable_prefix_caching=False)
    configure(configs[0], engine)
    try:
        print("compiled:", engine.wait_compiled(3600), flush=True)
        rates = {c: {b: [] for b in args.batches} for c in configs}
        for b in args.batches:
            for c in configs:                       # warm-up turn (a thread count's first
                configure(c, engine)                # call of a bucket may recompile)
                decode_rate(engine, b, 8)
            for r in range(args.rounds):
                for c in configs:
                    configure(c, engine)
                    rates[c][b].append(decode_rate(engine, b, args.tokens))
                    print(f"batch {b} round {r + 1} {c}: {rates[c][b][-1]:.1f} tok/s", flush=True)
    finally:
        engine.shutdown()
    med = {c: {b: statistics.median(v) for b, v in per.items()} for c, per in rates.items()}
    print(f"\n{args.weights}, decode tokens/s, median of {args.rounds} turns "
          f"(ratio to '{configs[0]}'):\n")
    print("| batch | " + " | ".join(configs) + " |")
    print("| --- |" + " --- |" * len(configs))
    for b in args.batches:
        base = med[configs[0]][b]
        cells = [f"{med[c][b]:.1f}" + ("" if c == configs[0] else f" ({med[c][b] / base:.2f}x)")
                 for c in configs]
        print(f"| {b} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"weights": args.weights, "tokens": args.tokens,
                                               "rounds": rates, "median": med}, indent=1))


if __name__ == "__main__":
    main()
