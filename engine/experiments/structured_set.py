"""Experiment ``structured-set``: a set of JSON schemas answered through the OpenAI API.

The set (``assets/structured-schemas.json``, 34 schemas written in the style of public
corpora such as JSONSchemaBench: objects, enums, arrays with ``minItems``/``maxItems``,
nested objects, numbers with ranges, string formats and patterns, a ``$ref`` tree, a
``oneOf``) is sent with the openai SDK as ``response_format`` ``json_schema``, one chat
request per schema and setting (greedy; with the full set also ``T = 0.9`` seed 1 and
``T = 1.0`` seed 2), to this engine's own API served in-process (``create_server``) or to any
OpenAI-compatible server (``base_url``: another engine on the same model). Each answer is
one of:

- ``valid``: ``finish_reason`` ``stop`` and the text parses and validates (``jsonschema``,
  formats not checked);
- ``invalid``: it ended but does not parse or validate;
- ``length``: ``max_tokens`` ended it mid-value;
- ``refused``: the server answered 400 (a schema it cannot compile).

Compile time is the cold compile of each schema on this engine's grammar compiler (a fresh
cache, the engine's llguidance tokenizer), not part of the requests' latency figures.

Run it against another server with
``python -m engine.experiments.structured_set --base-url http://127.0.0.1:8000/v1 --model NAME``.

Result fields beyond the common ones (see :mod:`.common`): ``cases`` (one per schema and
setting: ``name``, ``setting``, ``outcome``, ``finish_reason``, ``tokens``, ``seconds``,
``compile_ms``, ``text``, ``error``), ``counts`` (outcome -> count), ``base_url``,
``server`` (``"this engine"`` or the URL), ``max_tokens``, ``schemas``.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from engine.experiments.common import engine_config, engine_for, report, result, row

NAME = "structured-set"
TITLE = "Structured output on a set of JSON schemas: valid, cut by length, refused"
SCHEMAS = Path(__file__).resolve().parents[2] / "assets" / "structured-schemas.json"
SETTINGS = [{"temperature": 0.0}, {"temperature": 0.9, "seed": 1},
            {"temperature": 1.0, "seed": 2}]
"""Greedy, then two seeded samples (the full run; quick runs greedy only)."""
OUTCOMES = ("valid", "invalid", "length", "refused", "error")


def load_set(limit: int | None = None) -> list[dict]:
    """The schema set: ``[{"name", "prompt", "schema"}, ...]``, the first ``limit`` of it."""
    cases = json.loads(SCHEMAS.read_text())
    return cases[:limit] if limit else cases


def outcome(finish_reason: str | None, text: str, schema: dict) -> str:
    """``valid``, ``invalid`` or ``length`` for an answer that came back (see the module)."""
    if finish_reason == "length":
        return "length"
    try:
        import jsonschema

        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError, jsonschema.SchemaError):
        return "invalid"
    return "valid"


def ask(client, model: str, case: dict, setting: dict, max_tokens: int) -> dict:
    """One chat request for ``case`` under ``setting``; its outcome and figures."""
    import openai

    start = time.perf_counter()
    out = {"name": case["name"], "setting": _label(setting), "finish_reason": None,
           "tokens": 0, "text": "", "error": None}
    try:
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": case["prompt"]}],
            max_tokens=max_tokens, response_format={"type": "json_schema", "json_schema": {
                "name": case["name"], "schema": case["schema"]}}, **setting)
    except openai.BadRequestError as exc:
        out.update(outcome="refused", error=str(exc)[:200])
    except openai.APIError as exc:
        out.update(outcome="error", error=str(exc)[:200])
    else:
        choice = r.choices[0]
        text = choice.message.content or ""
        out.update(outcome=outcome(choice.finish_reason, text, case["schema"]),
                   finish_reason=choice.finish_reason, text=text[:160],
                   tokens=r.usage.completion_tokens if r.usage else 0)
    out["seconds"] = time.perf_counter() - start
    return out


def compile_ms(compiler, schema: dict) -> float | None:
    """Cold compile of ``schema`` in ms on a fresh cache sharing ``compiler``'s tokenizer
    (``None`` when it is refused)."""
    from engine.structured.compiler import GrammarCompiler
    from engine.structured.params import StructuredOutputError, StructuredOutputsParams

    fresh = GrammarCompiler(compiler.hf_tokenizer, compiler.vocab_size)
    fresh._ll_tokenizer = compiler.ll_tokenizer
    start = time.perf_counter()
    try:
        fresh.prepare(StructuredOutputsParams(json=schema))
    except StructuredOutputError:
        return None
    return (time.perf_counter() - start) * 1e3


@contextmanager
def served(engine):
    """This engine's OpenAI API on a free loopback port (uvicorn in a thread); yields the
    ``/v1`` URL."""
    import socket

    import uvicorn

    from engine.serve.app import create_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_server(engine)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        end = time.monotonic() + 30
        while not server.started and time.monotonic() < end:
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)
        app.state.metrics.detach()


def run(loaded, quick: bool = False, progress=None, engine=None, limit: int | None = None,
        max_tokens: int | None = None, base_url: str | None = None, model: str | None = None,
        settings: list[dict] | None = None, workers: int = 8) -> dict:
    """Send the set and classify the answers (see the module docstring).

    Args:
        quick: the first 3 schemas, greedy, ``max_tokens`` 48 (else all, three settings, 160).
        limit: schemas to send (the first ``limit``); max_tokens: per answer.
        base_url: another server's ``/v1`` URL (default: this engine's API, in-process);
            model: the model name it serves (default: the loaded model's name).
        settings: sampling settings per schema (default :data:`SETTINGS`, greedy when quick).
        workers: requests in flight at once.
    """
    try:
        import jsonschema  # noqa: F401
        import openai
    except ImportError as exc:
        return result(NAME, TITLE, quick, {}, status="skipped",
                      reason=f"needs the openai and jsonschema packages ({exc.name} missing)")
    cases = load_set(limit or (3 if quick else None))
    max_tokens = max_tokens or (48 if quick else 160)
    settings = settings or (SETTINGS[:1] if quick else SETTINGS)
    with engine_for(loaded, engine) as eng:
        report(progress, 0.05, "compiling each schema cold")
        compiler = eng.structured.compiler
        compiled = {c["name"]: compile_ms(compiler, c["schema"]) for c in cases}
        jobs = [(c, s) for s in settings for c in cases]
        with (served(eng) if base_url is None else _given(base_url)) as url:
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
            name = model or (loaded.info.name if base_url is None else client.models.list().data[0].id)
            done, rows = [0], []

            def one(job):
                out = ask(client, name, job[0], job[1], max_tokens)
                out["compile_ms"] = compiled[job[0]["name"]]
                done[0] += 1
                report(progress, 0.1 + 0.85 * done[0] / len(jobs), f"{done[0]}/{len(jobs)} answers")
                return out

            with ThreadPoolExecutor(workers) as pool:
                rows = list(pool.map(one, jobs))
        cfg = engine_config(eng)
    report(progress, 1.0, "done")
    counts = {k: sum(r["outcome"] == k for r in rows) for k in OUTCOMES}
    res = result(NAME, TITLE, quick, {"schemas": len(cases), "max_tokens": max_tokens,
                                      "settings": [_label(s) for s in settings]},
                 cases=rows, counts=counts, base_url=base_url,
                 server=base_url or "this engine", max_tokens=max_tokens, schemas=len(cases),
                 engine=cfg)
    known = [v for v in compiled.values() if v is not None]
    res["summary"] = [row(f"answers {k}", counts[k], f"of {len(rows)}") for k in OUTCOMES]
    res["summary"] += [row("cold compile per schema, median", sorted(known)[len(known) // 2]
                           if known else float("nan"), "ms"),
                       row("cold compile per schema, slowest", max(known) if known else
                           float("nan"), "ms")]
    res["notes"] = [f"{len(cases)} schemas x {len(settings)} settings, max_tokens {max_tokens}, "
                    f"sent with the openai SDK to {res['server']}; valid means parsed and "
                    "validated by jsonschema (formats not checked)."]
    return res


@contextmanager
def _given(url: str):
    yield url


def _label(setting: dict) -> str:
    if not setting.get("temperature"):
        return "greedy"
    return f"T={setting['temperature']:g} seed {setting.get('seed')}"


def table(res: dict) -> str:
    """The result as a Markdown table: one row per schema, one column per setting."""
    settings = res["params"]["settings"]
    by = {(r["name"], r["setting"]): r for r in res["cases"]}
    names = list(dict.fromkeys(r["name"] for r in res["cases"]))
    lines = ["| schema | compile ms | " + " | ".join(settings) + " |",
             "| --- | --- | " + " | ".join("---" for _ in settings) + " |"]
    for n in names:
        ms = by[(n, settings[0])]["compile_ms"]
        cells = [by[(n, s)]["outcome"] for s in settings]
        lines.append(f"| {n} | {'-' if ms is None else f'{ms:.1f}'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(res: dict, path: str) -> str:
    """Bars: answers by outcome."""
    from engine.experiments.plotting import ENGINE, figure, save

    fig, (ax,) = figure(res["title"], height=3.0)
    counts = res["counts"]
    ax.bar(list(counts), list(counts.values()), color=ENGINE)
    ax.set_ylabel("answers")
    return save(fig, path, f"{counts['valid']} of {sum(counts.values())} answers valid "
                           f"({res['server']}, max_tokens {res['max_tokens']})")


def main(argv=None) -> int:
    """``python -m engine.experiments.structured_set``: run the set against a server (or
    this engine) and print the table."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", help="an OpenAI-compatible server's /v1 URL (default: this "
                                      "engine, in-process)")
    p.add_argument("--model", help="the model name the server serves")
    p.add_argument("--limit", type=int, help="the first N schemas only")
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--greedy", action="store_true", help="greedy only (no seeded samples)")
    p.add_argument("--out", help="write the result as JSON here")
    p.add_argument("--weights", help="this engine's weights (default: the loader's, int4 on CPU)")
    args = p.parse_args(argv)
    loaded = None
    if args.base_url is None:
        from engine.model.loader import load_model

        loaded = load_model("smollm2-135m", **({"weights": args.weights} if args.weights else {}))
    settings = SETTINGS[:1] if args.greedy else SETTINGS
    if args.base_url is None:
        res = run(loaded, limit=args.limit, max_tokens=args.max_tokens, settings=settings)
    else:
        res = _remote(args, settings)
    print(table(res))
    print(res["counts"])
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


def _remote(args, settings) -> dict:
    """The set against ``args.base_url`` alone (compile times left empty)."""
    import openai

    cases = load_set(args.limit)
    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0, timeout=600)
    name = args.model or client.models.list().data[0].id
    jobs = [(c, s) for s in settings for c in cases]
    with ThreadPoolExecutor(8) as pool:
        rows = list(pool.map(lambda j: dict(ask(client, name, j[0], j[1], args.max_tokens),
                                            compile_ms=None), jobs))
    counts = {k: sum(r["outcome"] == k for r in rows) for k in OUTCOMES}
    return result(NAME, TITLE, False, {"schemas": len(cases), "max_tokens": args.max_tokens,
                                       "settings": [_label(s) for s in settings]},
                  cases=rows, counts=counts, server=args.base_url, max_tokens=args.max_tokens)


if __name__ == "__main__":
    raise SystemExit(main())
