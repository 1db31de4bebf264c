"""A/B in one process, the compiled step (int4, the default weights): every layer inlined into
the graph (``REGIONS`` off) against a layer's two halves compiled once as regions that every
layer runs (on, the default; ``engine.worker.compiled.llama_decode.REGIONS``), each engine
compiled into an empty cache folder of its own. Decode at batch 1, 2, 8 and 32 (48 greedy
tokens a sequence), and the time to first token of one prompt of about 1,100 tokens; six
rounds alternate the order (A B, then B A), the first a warm-up; each round's figure is the
TPOT median over its sequences (the TTFT for the prompt), the result the median of the rounds,
and whether both gave the same greedy tokens. The compile seconds printed are in one process
(the second engine may find kernels the first generated in memory); a cold start's are
measured by ``scripts/cold_start.py``. Usage (``WEIGHTS=bf16`` for the bf16 weights)::

    .venv/bin/python scripts/bench_regions.py > regions-ab.json
"""
import json
import os
import statistics
import sys
import tempfile
import time

os.environ["LLM_PLAYGROUND_COMPILE_PROCESS"] = "0"   # the child would not see REGIONS set below
import engine.worker.compiled.llama_decode as ld
from engine import LLMEngine, SamplingParams
from engine.model.loader import load_model

SIZES = (1, 2, 8, 32)
ROUNDS = 6
m = load_model("smollm2-135m", weights=os.environ.get("WEIGHTS", "auto"))
engines, compile_s = {}, {}
for mode in ("inlined", "regions"):
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"inductor-{mode}-")
    ld.REGIONS = mode == "regions"
    start = time.perf_counter()
    e = LLMEngine(m, compile="on", telemetry=False, max_num_seqs=32)
    st = e.wait_compiled(1800)
    compile_s[mode] = round(time.perf_counter() - start, 1)
    print(mode, st.status, compile_s[mode], file=sys.stderr, flush=True)
    engines[mode] = e
decode = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
first = SamplingParams(temperature=0, max_tokens=1)
words = ("river", "stone", "light", "garden", "paper", "window", "cloud", "music")
res = {"weights": os.environ.get("WEIGHTS", "auto"), "compile_s": compile_s}


def run(mode, case, r):
    e = engines[mode]
    if case == "prompt_1100":
        text = " ".join(words[(i * 7 + r) % 8] for i in range(1100))   # about 1,100 tokens
        o = e.submit(text, first, raw=True).result(600)
        return o.metrics.ttft_s * 1000, o.token_ids
    hs = [e.submit(f"Tell me about topic {i}, in a few words.", decode) for i in range(case)]
    outs = [h.result(600) for h in hs]
    return statistics.median(o.metrics.tpot_s for o in outs) * 1000, [o.token_ids for o in outs]


for case in (*SIZES, "prompt_1100"):
    per, toks = {"inlined": [], "regions": []}, {}
    for r in range(ROUNDS):
        for mode in (("inlined", "regions") if r % 2 == 0 else ("regions", "inlined")):
            ms, t = run(mode, case, r)
            toks.setdefault(r, {})[mode] = t
            if r:
                per[mode].append(ms)
    a, b = statistics.median(per["inlined"]), statistics.median(per["regions"])
    res[str(case)] = {"inlined_ms": round(a, 2), "regions_ms": round(b, 2), "ratio": round(b / a, 3),
                      "rounds": per, "same_tokens": all(t["inlined"] == t["regions"] for t in toks.values())}
    print(case, {k: v for k, v in res[str(case)].items() if k != "rounds"}, file=sys.stderr, flush=True)
print(json.dumps(res))
for e in engines.values():
    e.shutdown()
