"""``python -m engine generate``: stream one answer from the engine, or print it as JSON."""

from __future__ import annotations

import json
import sys

from engine.cli.common import fail
from engine.config import KV_CACHE_DTYPES

WEIGHTS = ("auto", "fp32", "bf16", "fp16", "int8", "int4")  # engine.model.quant.options.WEIGHTS (no torch here)


def register(sub) -> None:
    """Add the ``generate`` subcommand to an argparse subparsers object."""
    p = sub.add_parser("generate", help="generate text for one prompt")
    p.add_argument("--prompt", required=True, help="the prompt (one user message by default)")
    p.add_argument("--raw", action="store_true", help="send the prompt as plain text, no chat template")
    p.add_argument("--system", help="system prompt (chat mode)")
    p.add_argument("--model", default="smollm2-135m", help="embedded name, local folder or Hub id")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help="compute dtype: auto, float32, bfloat16, float16")
    p.add_argument("--weights", default="auto", choices=WEIGHTS,
                   help="weight storage: auto (int4 for the embedded model on CPU), fp32, bf16, "
                        "fp16, int8 (per channel) or int4 (groups of 32)")
    p.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES,
                   help="KV cache storage: auto (the model's dtype), bf16, fp16 or fp8 (e4m3)")
    p.add_argument("--temperature", type=float, default=None,
                   help="default 0.7; 0 is greedy; beam search (--beams) needs 0 or no value")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--seed", type=int)
    p.add_argument("--stop", nargs="+", default=[], help="stop strings")
    p.add_argument("--n", type=int, default=None,
                   help="answers to return: samples (default 1), or beams with --beams (default: "
                        "every beam, K)")
    p.add_argument("--best-of", type=int, help="samples to draw; the n with the highest "
                   "cumulative logprob are returned (default: n)")
    p.add_argument("--beams", type=int, default=1,
                   help="beam search with K beams (deterministic: temperature 0)")
    p.add_argument("--length-penalty", type=float, default=1.0,
                   help="beam search: score = sum of logprobs / length ** F (default 1.0)")
    p.add_argument("--early-stopping", default="false", choices=("true", "false", "never"),
                   help="beam search's stopping rule, Hugging Face's meanings (default false)")
    p.add_argument("--no-kv-cache", action="store_true", help="recompute the whole sequence each step")
    p.add_argument("--no-telemetry", action="store_true", help="skip the per-step memory breakdown")
    p.add_argument("--speculative", choices=("off", "ngram", "draft"), default="off",
                   help="speculative decoding: ngram = prompt lookup drafts, draft = greedy "
                        "drafts of --draft-model; verified in one pass")
    p.add_argument("--draft-model", default=None,
                   help="with --speculative draft: a smaller model with the same tokenizer "
                        "(embedded name, Hub id or local folder)")
    p.add_argument("--num-speculative-tokens", type=int, default=3,
                   help="most draft tokens verified per step (with --speculative; default 3)")
    p.add_argument("--compile", default="off", choices=("auto", "on", "off"),
                   help="decode step (default off: one generation ends before compiling pays "
                        "off; on compiles batch bucket 1 first, from the on-disk cache after "
                        "the first time)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the subcommand; returns the exit code."""
    from engine.params import SamplingParams

    beams = args.beams > 1
    check_prompt_args(args)
    temperature = args.temperature if args.temperature is not None else (0.0 if beams else 0.7)
    try:
        params = SamplingParams(
            temperature=temperature, top_k=args.top_k, top_p=args.top_p,
            min_p=args.min_p, repetition_penalty=args.repetition_penalty,
            max_tokens=args.max_tokens, seed=args.seed, stop=args.stop,
            n=args.n if args.n is not None else (args.beams if beams else 1),
            best_of=args.best_of, num_beams=args.beams, length_penalty=args.length_penalty,
            early_stopping={"true": True, "false": False}.get(args.early_stopping,
                                                              args.early_stopping))
    except ValueError as exc:
        fail(str(exc), 2)
    if args.speculative != "off":
        from engine.spec_decode.config import SpeculativeConfig

        try:  # checked before the model loads
            SpeculativeConfig(args.speculative, args.num_speculative_tokens)
        except ValueError as exc:
            fail(str(exc), 2)
    if args.speculative == "draft" and not args.draft_model:
        fail("--speculative draft needs --draft-model (a Hub id or a local folder of a smaller "
             "model with the same tokenizer)", 2)
    if args.draft_model:  # a bad name fails now, not after the target model has loaded
        from engine.model.locate import ModelLoadError, check_model_name

        try:
            check_model_name(args.draft_model, "--draft-model")
        except ModelLoadError as exc:
            fail(str(exc), 2)
    prompt = args.prompt
    if args.system:
        prompt = [{"role": "system", "content": args.system}, {"role": "user", "content": prompt}]

    from engine.engine import LLMEngine
    from engine.model.loader import ModelLoadError, load_model

    progress = None if args.json else (lambda m: print(f"[load] {m}", file=sys.stderr, flush=True))
    try:
        loaded = load_model(args.model, device=args.device, dtype=args.dtype, progress=progress,
                            weights=args.weights)
    except ModelLoadError as exc:
        fail(str(exc))
    try:
        spec = None if args.speculative == "off" else args.speculative
        engine = LLMEngine(loaded, telemetry=not args.no_telemetry,
                           kv_cache_dtype=args.kv_cache_dtype, speculative=spec,
                           num_speculative_tokens=args.num_speculative_tokens,
                           draft_model=args.draft_model, compile=args.compile,
                           **({"compile_batch_sizes": (1,)} if args.compile == "on" else {}))
        if args.compile == "on":
            engine.wait_compiled()
    except ValueError as exc:
        fail(str(exc), 2)
    except ModelLoadError as exc:   # the draft model
        fail(str(exc))
    try:
        try:
            handle = engine.submit(prompt, params, raw=args.raw, use_kv_cache=not args.no_kv_cache)
        except ValueError as exc:
            fail(str(exc), 2)
        for ev in handle:
            if not args.json and ev.text_delta and ev.index == 0:
                sys.stdout.write(ev.text_delta)
                sys.stdout.flush()
        out = handle.output
    finally:
        engine.shutdown()
    if args.json:
        print(json.dumps(result_json(out, handle.events, engine), ensure_ascii=False))
    else:
        m = out.metrics
        if beams:
            sys.stdout.write(out.text)
        for o in out.outputs[1:] if len(out.outputs) > 1 else []:
            print(f"\n--- {'beam' if beams else 'sample'} {o.index} (cumulative logprob "
                  f"{o.cumulative_logprob:.3f}, {o.finish_reason})\n{o.text}", end="")
        print()
        print(f"[{finish_words(out)}] prompt {m.prompt_tokens} tok, output {m.output_tokens} tok | "
              f"TTFT {m.ttft_s * 1000:.1f} ms | TPOT {m.tpot_s * 1000:.1f} ms | "
              f"decode {m.decode_tokens_per_s:.1f} tok/s | prefill {m.prefill_tokens_per_s:.0f} tok/s | "
              f"KV cache {out.kv_cache_bytes / 1e6:.2f} MB", file=sys.stderr)
        if out.speculative is not None:
            s = out.speculative
            print(f"[speculative {s['method']}] drafted {s['drafted']}, accepted {s['accepted']} "
                  f"({s['acceptance_rate']:.0%}), {s['tokens_per_step']:.2f} tokens per decode "
                  f"pass", file=sys.stderr)
    if out.finish_reason == "error":
        fail(out.error or "the request failed")
    return 0


def check_prompt_args(args) -> None:
    """Refuse a prompt the engine would refuse, before the model loads (seconds): an empty
    prompt, text that is not valid Unicode, or ``--system`` with ``--raw``. Exits with 2."""
    from engine.model.prompt import check_text

    if args.raw and args.system:
        fail("--system needs chat mode; drop --raw", 2)
    if not args.prompt.strip():
        fail("prompt is empty: type some text", 2)
    try:
        check_text(args.prompt, "prompt")
        if args.system:
            check_text(args.system, "system_prompt")
    except ValueError as exc:
        fail(str(exc), 2)


def finish_words(out) -> str:
    """Why the answer ended, in words for the closing line (``out.finish_reason`` is the
    machine-readable name): the model's end-of-text token, a stop string or token, the token
    limit, or an error."""
    reason = str(out.finish_reason)
    if reason == "stop":
        return ("finished: stop string or token" if out.stop_reason is not None
                else "finished: the model's end-of-text token")
    if reason == "length":
        return "finished: reached max tokens"
    if reason == "abort":
        return "aborted"
    return reason


def result_json(out, events, engine) -> dict:
    """The ``--json`` object: text, ids, deltas, metrics, KV bytes, memory and per-step rows.

    ``text`` and ``token_ids`` are the best beam or the first sample; ``outputs`` lists every
    returned beam or sample (``index``, ``text``, ``token_ids``, ``cumulative_logprob``,
    ``finish_reason``, and a beam's ``score``)."""
    from engine.telemetry.trace import trace_rows

    m = out.metrics
    memory = out.memory.to_dict() if out.memory is not None else None
    return {
        "model": engine.info.name, "device": engine.info.device, "dtype": engine.info.dtype,
        "weights": engine.info.weights, "weights_bytes": engine.info.weights_bytes,
        "kv_cache_dtype": engine.info.kv_dtype,
        "text": out.text, "token_ids": out.token_ids, "prompt_token_ids": out.prompt_token_ids,
        "finish_reason": out.finish_reason, "stop_reason": out.stop_reason, "error": out.error,
        "deltas": out.deltas, "use_kv_cache": out.use_kv_cache,
        "outputs": [o.to_dict() for o in out.outputs],
        # the engine's RequestMetrics under its own names, plus the short names of earlier
        # releases (prefill_s, decode_s, queue_s), kept so scripts that read them still work
        "metrics": {**m.to_dict(), "prefill_s": m.prefill_time_s, "decode_s": m.decode_time_s,
                    "queue_s": m.queue_time_s},
        "kv_cache_bytes": out.kv_cache_bytes,
        "kv_cache_bytes_formula": engine.spec.kv_cache_bytes(
            len(out.prompt_token_ids) + max(len(out.token_ids) - 1, 0), engine.info.kv_dtype_bytes)
        if out.use_kv_cache else 0,
        "memory": memory,
        "steps": trace_rows(events, engine.spec, engine.info.kv_dtype_bytes),
        # drafted, accepted, acceptance_rate, tokens_per_step, ... (None without speculation)
        "speculative": out.speculative,
    }
