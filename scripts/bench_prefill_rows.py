"""A/B in one process: prompts prefilled as rows of the compiled graph (``PREFILL_ROWS``) against
transformers' eager code, on one compiled engine per weight format, alternating turns (A B, then
B A), the first round a warm-up. Each request is a raw prompt of about ``--tokens`` tokens with
a first token of its own (prefix caching off), one greedy new token; the figure is the time to
first token. Prints JSON: per weight format, the medians, their ratio, prefill tok/s, and
whether both ways gave the same first token. Usage::

    .venv/bin/python scripts/bench_prefill_rows.py --weights bf16 int4 --tokens 512 1024 > out.json
"""
import argparse
import json
import statistics
import sys
import time

import engine.worker.compiled.compiled_backend as cb
from engine import LLMEngine, SamplingParams
from engine.model.loader import load_model

ap = argparse.ArgumentParser()
ap.add_argument("--weights", nargs="+", default=["bf16", "int4"])
ap.add_argument("--tokens", nargs="+", type=int, default=[1024])
ap.add_argument("--rounds", type=int, default=5)
args = ap.parse_args()
TEXT = ("Here is a short passage about the weather in spring, the rivers that fill with rain and "
        "the farmers who watch the sky before they plant. ")
res = {}
counter = [0]
for w in args.weights:
    m = load_model("smollm2-135m", weights=w)
    body = m.tokenizer.encode(TEXT * 200, add_special_tokens=False)
    eng = LLMEngine(m, compile="on", telemetry=False, enable_prefix_caching=False)
    st = eng.wait_compiled(1800)
    print(w, st.status, file=sys.stderr, flush=True)
    g = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)

    def ttft(n, rows):
        cb.PREFILL_ROWS = rows
        counter[0] += 1
        text = f"{counter[0]}. " + m.tokenizer.decode(body[:n - 4])
        t = time.perf_counter()
        out = eng.submit(text, g, raw=True).result(600)
        return time.perf_counter() - t, out.token_ids[0]

    for n in args.tokens:
        per = {"eager": [], "rows": []}
        first = {}
        for r in range(args.rounds + 1):
            order = ("eager", "rows") if r % 2 == 0 else ("rows", "eager")
            for name in order:
                dt, tok = ttft(n, name == "rows")
                first.setdefault(name, tok)
                if r:
                    per[name].append(dt)
        a, b = statistics.median(per["eager"]), statistics.median(per["rows"])
        res[f"{w}@{n}"] = {"eager_s": round(a, 3), "rows_s": round(b, 3), "speedup": round(a / b, 2),
                           "eager_tok_s": round(n / a), "rows_tok_s": round(n / b),
                           "rounds": per, "rows_error": eng.runner.backend.rows_error}
        print(w, n, {k: v for k, v in res[f"{w}@{n}"].items() if k != "rounds"}, file=sys.stderr, flush=True)
    eng.shutdown()
print(json.dumps(res, indent=1))
