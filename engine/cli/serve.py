"""``python -m engine serve``: the engine behind an OpenAI-compatible HTTP API (FastAPI and
uvicorn, no Gradio), with Prometheus metrics at ``/metrics``."""

from __future__ import annotations

import os
import signal
import sys

from engine.cli.common import fail
from engine.cli.generate import WEIGHTS
from engine.config import COMPILE_MODES, KV_CACHE_DTYPES
from engine.serve.read_timeouts import DEFAULT_BODY_TIMEOUT_S, DEFAULT_HEADER_TIMEOUT_S


def register(sub) -> None:
    """Add the ``serve`` subcommand to an argparse subparsers object."""
    p = sub.add_parser("serve", help="serve the OpenAI-compatible API (/v1) and /metrics")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--model", default="smollm2-135m", help="embedded name, local folder or Hub id")
    p.add_argument("--served-model-name", help="the name clients use (default: the model's name)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help="compute dtype: auto, float32, bfloat16, float16")
    p.add_argument("--weights", default="auto", choices=WEIGHTS,
                   help="weight storage (default auto: int4 for the embedded model on CPU)")
    p.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES)
    p.add_argument("--max-queue", type=int, default=32,
                   help="requests allowed to wait (one more gets 429; default 32)")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on /v1 routes "
                        "(default: $LLM_PLAYGROUND_API_KEY; none on loopback)")
    p.add_argument("--allow-unauthenticated", action="store_true",
                   help="allow a non-loopback --host without an API key")
    p.add_argument("--compile", default=None, choices=COMPILE_MODES,
                   help="decode step: auto (compiled on CPU for Llama-family models, in the "
                        "background while eager serves), on, off (default: auto)")
    p.add_argument("--compile-wait", action="store_true",
                   help="compile every batch bucket before serving (benchmarks, image builds)")
    p.add_argument("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT_S,
                   help="seconds a client may take to send a request's headers before the "
                        f"connection is closed (default {DEFAULT_HEADER_TIMEOUT_S:g})")
    p.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT_S,
                   help="seconds a client may take to send a request's body after its headers "
                        f"(default {DEFAULT_BODY_TIMEOUT_S:g})")
    p.add_argument("--log-level", default="warning", help="uvicorn's log level (default warning)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Load the model, start the engine and serve until interrupted; returns the exit code.

    On SIGTERM uvicorn shuts down gracefully and then raises the signal again for the handler
    it found, the default one of which would kill the process (status −15) before the engine
    stops; the handler installed here only asks the server to exit, so the engine stops and the
    command returns 0."""
    from engine.serve.auth import check_bind, resolve_key
    from engine.serve.read_timeouts import ReadTimeouts, timed_http_protocol

    key = resolve_key(args.api_key)
    try:
        check_bind(args.host, key, args.allow_unauthenticated)
        timeouts = ReadTimeouts(args.header_timeout, args.body_timeout)
    except ValueError as exc:
        fail(str(exc), 2)

    import uvicorn

    from engine.engine import LLMEngine
    from engine.model.loader import ModelLoadError, load_model
    from engine.serve.app import create_server

    try:
        loaded = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights,
                            progress=lambda m: print(f"[load] {m}", file=sys.stderr, flush=True))
        options = {} if args.compile is None else {"compile": args.compile}
        if args.compile_wait:   # nothing is served meanwhile: compile in this process
            from engine.worker.compiled.compile_process import ENV

            os.environ.setdefault(ENV, "0")
        engine = LLMEngine(loaded, max_queue=args.max_queue, kv_cache_dtype=args.kv_cache_dtype,
                           **options)
    except (ModelLoadError, ValueError, OSError) as exc:
        fail(str(exc), 2)
    if args.compile_wait:
        print("[load] compiling the decode step...", file=sys.stderr, flush=True)
        status = engine.wait_compiled()
        print(f"[load] decode step: {status.path} ({status.status}, "
              f"{status.compile_s:.0f} s, cache hits {status.cache_hits})"
              + (f": {status.error}" if status.error else ""), file=sys.stderr, flush=True)
    name = args.served_model_name or engine.info.name
    app = create_server(engine, name, api_key=key, aliases={args.model, engine.info.name})
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=5, access_log=False,
                            http=timed_http_protocol(timeouts))
    server = uvicorn.Server(config)
    print(f"Serving {name} ({engine.info.weights} weights on {engine.info.device}) at "
          f"http://{args.host}:{args.port}/v1" + (" (API key required)" if key else ""),
          file=sys.stderr, flush=True)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: setattr(server, "should_exit", True))
    try:
        server.run()  # uvicorn: SIGTERM shuts down gracefully, then is raised again for the handler above
    finally:
        signal.signal(signal.SIGTERM, previous)
        app.state.serve.closing = True
        engine.shutdown()
    return 0
