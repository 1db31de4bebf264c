"""``python -m app``: load the model, start the engine, serve the playground page."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags. Host and port default to ``$GRADIO_SERVER_NAME``/``$GRADIO_SERVER_PORT``
    when set (Hugging Face Spaces sets them), else 127.0.0.1:7860 (loopback only)."""
    p = argparse.ArgumentParser(prog="python -m app", description="LLM inference playground (Gradio page)")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", DEFAULT_HOST),
                   help="address to bind (default 127.0.0.1; 0.0.0.0 to serve the network)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", DEFAULT_PORT)),
                   help="port (default 7860)")
    p.add_argument("--model", default=None,
                   help="embedded short name, Hugging Face model id or local folder (default "
                        "smollm2-135m); with --backend openai, the remote model (default: the "
                        "first the server lists)")
    p.add_argument("--backend", default="builtin", choices=("builtin", "openai"),
                   help="builtin: this project's engine in this process (default); openai: drive "
                        "a remote OpenAI-compatible server at --base-url")
    p.add_argument("--base-url", default=None,
                   help="with --backend openai: the server's API base, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda[:N] or mps (default auto)")
    p.add_argument("--dtype", default="auto", help="compute dtype: auto, float32, float16 or bfloat16 "
                   "(default auto)")
    p.add_argument("--weights", default="auto", choices=("auto", "fp32", "bf16", "fp16", "int8", "int4"),
                   help="weight storage (default auto: int4 for the embedded model on CPU, else the "
                        "dtype); int8 per channel, int4 in groups of 32")
    p.add_argument("--kv-cache-dtype", default="auto", choices=("auto", "bf16", "fp16", "fp8"),
                   help="KV cache storage (default auto: the model's dtype); fp8 is e4m3 with a "
                        "per-layer scale")
    p.add_argument("--speculative", choices=("off", "ngram", "draft"), default="off",
                   help="speculative decoding for the page's requests: ngram = prompt lookup "
                        "drafts, draft = greedy drafts of --draft-model; verified in one pass "
                        "(default off)")
    p.add_argument("--draft-model", default=None,
                   help="with --speculative draft: a smaller model with the same tokenizer "
                        "(embedded name, Hub id or local folder)")
    p.add_argument("--compile", default=None, choices=("auto", "on", "off"),
                   help="decode step: auto (compiled on CPU for Llama-family models, in the "
                        "background while the page serves eagerly), on, off (default: auto)")
    p.add_argument("--max-queue", type=int, default=32, help="most requests waiting in the engine (default 32)")
    p.add_argument("--share", action="store_true", help="also open a public gradio.live link (off by default)")
    p.add_argument("--shared-prefix-cache", action="store_true",
                   help="let all users share cached prompt prefixes (faster with a common system "
                        "prompt, but a user can then confirm another's prompt prefix by timing); "
                        "off by default: each session has its own")
    p.add_argument("--api-key", default=None,
                   help="builtin: require 'Authorization: Bearer KEY' on this page's /v1 routes "
                        "(default: $LLM_PLAYGROUND_API_KEY; none needed on loopback); openai: the "
                        "key sent to the remote server")
    p.add_argument("--allow-unauthenticated", action="store_true",
                   help="serve /v1 without a key on a non-loopback --host")
    p.add_argument("--no-api", action="store_true", help="no OpenAI-compatible /v1 routes")
    p.add_argument("--compare-base-url", default=None,
                   help="an OpenAI-compatible server beside the built-in engine, for the Compare "
                        "tab's \"this engine vs the remote server\" preset (e.g. "
                        "http://127.0.0.1:8000/v1; hidden without one)")
    p.add_argument("--lessons", choices=("on", "off"), default="on",
                   help="the Lessons tab's experiments (default on); off for a public server: "
                        "each run takes minutes of the machine and up to ~2.5 GB (two run at "
                        "once, one per session; the tab then shows a note and no lesson event "
                        "exists to call)")
    p.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a client may take to send a request's headers before the "
                        "connection is closed (default 10)")
    p.add_argument("--body-timeout", type=float, default=30.0,
                   help="seconds a client may take to send a request's body after its headers "
                        "(default 30)")
    return p.parse_args(argv)


def theme():
    """The page's Gradio theme (given to ``launch``, as Gradio 6 asks)."""
    import gradio as gr

    return gr.themes.Soft(primary_hue="blue", neutral_hue="slate")


def main(argv: list[str] | None = None) -> int:
    """Load the model (printing progress), build the page and serve it until interrupted."""
    args = parse_args(argv)
    from engine.serve.read_timeouts import ReadTimeouts

    try:
        args.read_timeouts = ReadTimeouts(args.header_timeout, args.body_timeout)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from app.server.launch import set_gradio_env

    set_gradio_env()
    # warnings and errors (with the tracebacks behind a client's "internal error (request
    # err-...)") go to stderr with a timestamp; INFO stays off (it would log every HTTP call)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.backend == "openai":
        return _serve_remote(args)
    args.model = args.model or "smollm2-135m"
    from engine import LLMEngine, load_model
    from engine.model.locate import ModelLoadError, check_model_name

    if args.speculative == "draft" and not args.draft_model:
        print("error: --speculative draft needs --draft-model (a smaller model with the same "
              "tokenizer)", file=sys.stderr)
        return 2
    if args.draft_model:  # a bad name fails now, not after the target model has loaded
        try:
            check_model_name(args.draft_model, "--draft-model")
        except ModelLoadError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    t0 = time.perf_counter()
    print(f"Loading {args.model} ...", flush=True)
    try:
        loaded = load_model(args.model, device=args.device, dtype=args.dtype, weights=args.weights,
                            progress=lambda msg: print(f"  {msg}", flush=True))
        compile_option = {} if args.compile is None else {"compile": args.compile}
        engine = LLMEngine(loaded, max_queue=args.max_queue, telemetry=True, **compile_option,
                           kv_cache_dtype=args.kv_cache_dtype,
                           speculative=None if args.speculative == "off" else args.speculative,
                           draft_model=args.draft_model)
    except (ModelLoadError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    info = engine.info
    print(f"Model ready in {time.perf_counter() - t0:.1f} s: {info.name} on {info.device} ({info.weights} "
          f"weights, compute {info.dtype}, KV cache {info.kv_dtype})", flush=True)

    return serve(engine, args)


def _serve_remote(args: argparse.Namespace) -> int:
    """The page in front of a remote OpenAI-compatible server (no model here, no torch)."""
    from app.remote import RemoteEngine
    from app.remote.stream import RemoteError

    if not args.base_url:
        print("error: --backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)",
              file=sys.stderr)
        return 2
    try:
        engine = RemoteEngine(args.base_url, api_key=args.api_key, model=args.model)
    except RemoteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Remote engine: {engine.info.served_by} at {engine.info.base_url}, model "
          f"{engine.info.name}", flush=True)
    args.no_api = True  # no engine of our own to serve
    return serve(engine, args)


def serve(engine, args: argparse.Namespace) -> int:
    """Serve the page around a running engine until interrupted (Ctrl-C or SIGTERM), then
    remove every file the server made (traces, uploads, Gradio's copies) and stop the engine."""
    from app.server.assets import read_css
    from app.server.launch import launch, private_temp_dir
    from app.state.playground import Playground
    from app.page import build_demo

    # Gradio's uploads and served copies go to a private folder; the traces live inside it,
    # so Gradio serves them where they are instead of copying them
    stop = threading.Event()
    with private_temp_dir() as gradio_tmp, _sigterm_sets(stop):
        pg = Playground(engine, trace_parent=gradio_tmp, shared_prefix_cache=args.shared_prefix_cache)
        demo = None
        try:
            # Let every request reach the engine (running + waiting, with room to spare) so users
            # see the engine's own queue position and its "queue is full" message rather than
            # Gradio's queue.
            concurrency = 2 * args.max_queue + 4
            peer = _compare_peer(args, engine)
            demo = build_demo(pg, max_concurrency=concurrency,
                              with_lessons=getattr(args, "lessons", "on") != "off", compare_peer=peer)
            demo.queue(default_concurrency_limit=concurrency)
            local_url, share_url = launch(demo, args.host, args.port, share=args.share, theme=theme(),
                                          css=read_css(), max_threads=concurrency + 8,
                                          read_timeouts=getattr(args, "read_timeouts", None))
            shown = local_url if args.host not in ("0.0.0.0", "::") else f"http://127.0.0.1:{args.port}/"
            print(f"Playground running at {shown}" + (f" (public: {share_url})" if share_url else ""),
                  flush=True)
            if not getattr(args, "no_api", True):  # serve() called without the flag: no API
                _mount_api(demo, engine, args, shown)
            wait_for_stop(demo, stop)
        except KeyboardInterrupt:
            pass
        finally:
            if demo is not None:
                close_page(demo)
                engines = getattr(demo, "compare_engines", None)
                if engines is not None:  # the Compare tab's second variants and its peer
                    engines.shutdown()
                    if engines.peer is not None:
                        engines.peer.shutdown()
            pg.close()
            engine.shutdown()
    return 0


def _compare_peer(args: argparse.Namespace, engine):
    """The Compare tab's remote server (``--compare-base-url``) beside a built-in engine, or
    ``None`` (none given, the page is itself remote, or the server can't be reached: said in one
    line)."""
    url = getattr(args, "compare_base_url", None)
    if not url or engine.capabilities.remote:
        return None
    from app.remote import RemoteEngine
    from app.remote.stream import RemoteError

    try:
        peer = RemoteEngine(url)
    except RemoteError as exc:
        print(f"Compare: no remote server ({exc})", flush=True)
        return None
    print(f"Compare: remote server {peer.info.served_by} at {peer.info.base_url}", flush=True)
    return peer


def wait_for_stop(demo, stop: threading.Event) -> None:
    """Block the main thread while the page serves, until ``stop`` is set (SIGTERM) or the page
    stops; Ctrl-C raises ``KeyboardInterrupt`` out of it. Gradio's own ``block_thread`` would
    print a "Keyboard interruption" line for either."""
    while demo.is_running and not stop.wait(0.1):
        pass


def close_page(demo) -> None:
    """Close the page's server (Gradio's ``close``, without its console line) and any
    ``--share`` tunnel (Gradio kills those only in ``block_thread`` or at interpreter exit)."""
    from gradio.tunneling import CURRENT_TUNNELS

    demo.close(verbose=False)
    for tunnel in list(CURRENT_TUNNELS):
        tunnel.kill()


def _mount_api(demo, engine, args, shown: str) -> None:
    """Serve the OpenAI-compatible API under ``/v1`` on the page's port (see
    :mod:`app.server.openai_mount`), or say in one line why not."""
    from app.server.openai_mount import mount_api

    refused = mount_api(demo.server_app, engine, host=args.host, api_key=args.api_key,
                        allow_unauthenticated=args.allow_unauthenticated,
                        include_prefix=args.shared_prefix_cache, aliases={args.model})
    print(f"OpenAI-compatible API off: {refused}" if refused else
          f"OpenAI-compatible API at {shown.rstrip('/')}/v1, Prometheus metrics at "
          f"{shown.rstrip('/')}/metrics", flush=True)


@contextmanager
def _sigterm_sets(stop: threading.Event):
    """While inside, SIGTERM (``docker stop``, a Space restart) sets ``stop``: the serving loop
    then closes the page, stops the engine and removes the server's files, and the process exits
    with status 0 (no exception is raised into whatever the main thread was doing)."""
    def on_term(signum, frame):
        stop.set()

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
