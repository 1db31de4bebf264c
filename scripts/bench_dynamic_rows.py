"""A/B in one process, the compiled decode step (int4, the default weights): one graph per batch
bucket (static, ``DYNAMIC_ROWS`` off) against the shared graph whose rows are a symbol
(dynamic), at batch 1 (static bucket 1 against the shared graph padded to 2 rows) and at 2, 8
and 32. Six rounds alternate the order (A B, then B A), the first a warm-up; each round's figure
is the TPOT median over its sequences, the result the median of the rounds, and whether both
gave the same greedy tokens. Usage::

    .venv/bin/python scripts/bench_dynamic_rows.py > dynamic-rows-ab.json
"""
import json
import statistics
import sys
import engine.worker.compiled.compiled_backend as cb
from engine import LLMEngine, SamplingParams
from engine.model.loader import load_model
SIZES = (1, 2, 8, 32)
m = load_model("smollm2-135m")
engines = {}
for mode in ("static", "dynamic"):
    cb.DYNAMIC_ROWS = (mode == "dynamic")
    e = LLMEngine(m, compile="on", telemetry=False, compile_batch_sizes=SIZES, max_num_seqs=32)
    st = e.wait_compiled(1800)
    print(mode, st.status, st.compile_s, st.direct, file=sys.stderr, flush=True)
    engines[mode] = e
g = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
dyn_state = engines["dynamic"].runner.backend.state
res = {}
def run(mode, b):
    e = engines[mode]
    hs = [e.submit(f"Tell me about topic {i}, in a few words.", g) for i in range(b)]
    outs = [h.result(600) for h in hs]
    return statistics.median(o.metrics.tpot_s for o in outs) * 1000, [o.token_ids for o in outs]
for b in SIZES:
    names = ["static", "dynamic-padded" if b == 1 else "dynamic"]
    per = {n: [] for n in names}
    toks = {}
    for r in range(6):
        order = names if r % 2 == 0 else names[::-1]
        for n in order:
            if n == "dynamic-padded":
                dyn_state.ready = [x for x in SIZES if x != 1]
            ms, t = run("static" if n == "static" else "dynamic", b)
            dyn_state.ready = list(SIZES)
            if r == 0:
                toks[n] = t
                continue
            per[n].append(ms)
    a, c = statistics.median(per[names[0]]), statistics.median(per[names[1]])
    res[b] = {names[0] + "_ms": round(a, 2), names[1] + "_ms": round(c, 2), "ratio": round(c / a, 3),
              "rounds": per, "same_tokens": toks[names[0]] == toks[names[1]]}
    print("batch", b, {k: v for k, v in res[b].items() if k != "rounds"}, file=sys.stderr, flush=True)
print(json.dumps(res))
for e in engines.values():
    e.shutdown()
