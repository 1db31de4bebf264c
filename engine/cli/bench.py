"""``python -m engine bench``: run the experiments, write results.json, PNGs and summary.md."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from engine.cli.common import fail
from engine.cli.generate import WEIGHTS
from engine.config import KV_CACHE_DTYPES
from engine.experiments import NAMES

EXPERIMENT_NAMES = NAMES  # the registry's order, read without importing an experiment (--help needs no torch)


def register(sub) -> None:
    """Add the ``bench`` subcommand to an argparse subparsers object."""
    p = sub.add_parser("bench", help="run the benchmarks and lessons' experiments",
                       description="Run experiments and write results.json, one PNG per "
                                   "experiment and summary.md. Experiments: "
                                   + ", ".join(EXPERIMENT_NAMES) + " (default: all).")
    p.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                   help=f"names to run, in order (default: all): {', '.join(EXPERIMENT_NAMES)}")
    p.add_argument("--model", default="smollm2-135m", help="embedded name, local folder or Hub id")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--weights", default="auto", choices=WEIGHTS,
                   help="weight storage of the model the experiments run on (default auto: int4 "
                        "for the embedded model on CPU); the quantization experiment loads every option")
    p.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES,
                   help="KV cache storage of the experiments' engine (default auto)")
    p.add_argument("--quick", action="store_true",
                   help="small sizes: all experiments in under two minutes on 2 CPU cores")
    p.add_argument("--out", default="bench-out", help="output folder (default: bench-out)")
    p.set_defaults(func=run)


class _Bar:
    """Progress over all experiments: a tqdm bar on stderr, or plain lines when tqdm is missing."""

    def __init__(self, total: int) -> None:
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=total, file=sys.stderr, unit="exp",
                            bar_format="{l_bar}{bar}| {n:.1f}/{total} [{elapsed}<{remaining}]")
        except ImportError:
            self.bar = None
        self.base = 0
        self.last = ""

    def callback(self, name: str):
        def update(fraction: float, message: str) -> None:
            if self.bar is not None:
                self.bar.n = self.base + fraction
                self.bar.set_description(f"{name}: {message}"[:60], refresh=True)
            elif message != self.last:
                print(f"[bench] {name}: {message}", file=sys.stderr, flush=True)
            self.last = message
        return update

    def next(self) -> None:
        self.base += 1
        if self.bar is not None:
            self.bar.n = self.base
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _clean(x):
    """JSON-ready copy: tuples to lists, non-finite floats to None, numpy scalars to Python."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v).replace("|", "\\|")


SERVED = ("llama-cpp", "speculative")
"""Experiments that ``bench`` runs on an engine with the decode step ``serve`` runs (their
modules' ``SERVED``; named here so that ``summary.md`` needs no import of them)."""


def _engine_line(cfg: dict) -> str:
    if not cfg:
        return "unknown"
    mode = (f"continuous batching (up to {cfg['max_num_seqs']} sequences, "
            f"{cfg['max_num_batched_tokens']} tokens per step)" if cfg.get("batching")
            else "one request at a time")
    return (f"{mode}, prefix caching {'on' if cfg.get('prefix_caching') else 'off'}, "
            f"telemetry {'on' if cfg.get('telemetry') else 'off'}"
            + (f", decode step {cfg['decode_step']}" if cfg.get("decode_step") else ""))


def summary_markdown(doc: dict) -> str:
    """``summary.md``: machine, model, command, then one table row per summary metric."""
    m = doc["machine"]
    model = m.get("model", {})
    lines = [f"# Benchmark summary{' (quick)' if doc['quick'] else ''}", "",
             f"- Command: `{doc['command']}`",
             f"- Machine: {m['cpu']}, {m['logical_cores']} logical cores, "
             f"{m['ram_bytes'] / 1e9:.1f} GB RAM" + (f", GPU {m['gpu']}" if m.get("gpu") else ", no GPU"),
             f"- Software: Python {m['python']}, torch {m['torch']}, transformers {m['transformers']}",
             f"- Model: {model.get('name')} ({model.get('weights', '')} weights, compute "
             f"{model.get('dtype')} on {model.get('device')}, {model.get('weights_bytes', 0):,} "
             f"weight bytes; KV cache {doc.get('engine', {}).get('kv_cache_dtype', 'auto')})",
             f"- Engine: {_engine_line(doc.get('engine', {}))}",
             *([f"- Engine of {', '.join(n for n in doc['experiments'] if n in SERVED)}: "
                f"{_engine_line(doc['served_engine'])}"] if doc.get("served_engine") else []),
             f"- Time: {m['timestamp']}; load average at start {m.get('load_average')}", "",
             "| experiment | metric | value | unit |", "| --- | --- | --- | --- |"]
    for name, res in doc["experiments"].items():
        for r in res.get("summary", []):
            lines.append(f"| {name} | {_fmt(r['metric'])} | {_fmt(r['value'])} | {_fmt(r['unit'])} |")
    pngs = [f"`{r['png']}`" for r in doc["experiments"].values() if r.get("png")]
    lines += ["", "Plots: " + (", ".join(pngs) if pngs else "none"), ""]
    for name, res in doc["experiments"].items():
        for note in res.get("notes", []):
            lines.append(f"- {name}: {note}")
    return "\n".join(lines) + "\n"


def results_table(doc: dict) -> str:
    """The results for the terminal: one aligned line per summary metric, grouped by experiment
    (the same rows as ``summary.md``)."""
    rows = [(name, _fmt(r["metric"]), _fmt(r["value"]), _fmt(r["unit"]))
            for name, res in doc["experiments"].items() for r in res.get("summary", [])]
    if not rows:
        return "no results"
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    lines, last = [], None
    for name, metric, value, unit in rows:
        head = name if name != last else ""
        last = name
        lines.append(f"{head:<{w[0]}}  {metric:<{w[1]}}  {value:>{w[2]}} {unit}".rstrip())
    return "\n".join(lines)


def command_line(args) -> str:
    """The ``python -m engine bench ...`` line that reproduces this run."""
    parts = ["python -m engine bench", *args.experiments]
    for flag, default in (("model", "smollm2-135m"), ("device", "auto"), ("dtype", "auto"),
                          ("weights", "auto"), ("kv_cache_dtype", "auto")):
        if getattr(args, flag, default) != default:
            parts.append(f"--{flag.replace('_', '-')} {getattr(args, flag)}")
    if args.quick:
        parts.append("--quick")
    parts.append(f"--out {args.out}")
    return " ".join(parts)


def run(args) -> int:
    """Run the subcommand; returns 0 when no experiment failed, 1 otherwise."""
    names = args.experiments or EXPERIMENT_NAMES
    unknown = [n for n in names if n not in EXPERIMENT_NAMES]
    if unknown:
        fail(f"unknown experiment(s) {', '.join(unknown)}; choose from {', '.join(EXPERIMENT_NAMES)}", 2)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    from engine.experiments import EXPERIMENTS, run_experiment
    from engine.experiments.common import engine_config, private_engine
    from engine.experiments.machine import describe
    from engine.model.loader import ModelLoadError, load_model

    t0 = time.perf_counter()
    try:
        loaded = load_model(args.model, device=args.device, dtype=args.dtype,
                            weights=getattr(args, "weights", "auto"),
                            progress=lambda m: print(f"[load] {m}", file=sys.stderr, flush=True))
    except ModelLoadError as exc:
        fail(str(exc))
    doc = {"command": command_line(args),
           "quick": bool(args.quick), "machine": describe(loaded), "experiments": {}}
    try:
        engine = private_engine(loaded, kv_cache_dtype=getattr(args, "kv_cache_dtype", "auto"))
    except ValueError as exc:
        fail(str(exc), 2)
    doc["engine"] = engine_config(engine)
    served = None    # the decode step `serve` runs, for experiments beside a peer (made once)
    bar = _Bar(len(names))
    try:
        for name in names:
            eng = engine
            if EXPERIMENTS[name].served:
                if served is None:
                    served = private_engine(loaded, compile="auto",
                                            kv_cache_dtype=getattr(args, "kv_cache_dtype", "auto"))
                    served.wait_compiled(3600)
                    doc["served_engine"] = engine_config(served)
                eng = served
            res = run_experiment(name, loaded, quick=args.quick, progress=bar.callback(name),
                                 engine=eng)
            res["png"] = None
            if res["status"] == "ok":
                try:
                    png = out_dir / f"{name}.png"
                    EXPERIMENTS[name].plot(res, str(png))
                    res["png"] = png.name
                except Exception as exc:  # noqa: BLE001 - a plot failure keeps the numbers
                    res["notes"].append(f"plot failed: {type(exc).__name__}: {exc}")
            doc["experiments"][name] = res
            bar.next()
    finally:
        bar.close()
        engine.shutdown()
        if served is not None:
            served.shutdown()
    doc["elapsed_s"] = time.perf_counter() - t0
    (out_dir / "results.json").write_text(json.dumps(_clean(doc), indent=2, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
    (out_dir / "summary.md").write_text(summary_markdown(doc), encoding="utf-8")
    failed = [n for n, r in doc["experiments"].items() if r["status"] == "error"]
    print(results_table(doc))
    for n, r in doc["experiments"].items():
        state = r["status"] if r["status"] != "skipped" else f"skipped ({r.get('reason')})"
        print(f"{n:14s} {state:8s} {r['elapsed_s']:6.1f} s", file=sys.stderr)
        if r["status"] == "error":
            print(f"  {r['error']}", file=sys.stderr)
    print(f"wrote {out_dir / 'results.json'}, {out_dir / 'summary.md'} and "
          f"{sum(1 for r in doc['experiments'].values() if r.get('png'))} PNG(s) "
          f"in {doc['elapsed_s']:.0f} s", file=sys.stderr)
    return 1 if failed else 0
