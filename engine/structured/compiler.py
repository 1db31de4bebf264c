"""Grammars from structures, compiled once per structure and cached (llguidance).

llguidance (the guidance project's Rust engine, one of vLLM's structured-output backends)
turns a JSON schema, a regex, a Lark or GBNF grammar into a grammar over bytes and, with the
model's tokenizer, computes at each step the bitmask of tokens that keep the output valid
(Earley parsing over a lexer of derivative-based regexes; see its docs/ on GitHub).

Compiling happens in :meth:`GrammarCompiler.prepare`, called through ``matcher_for`` by
``LLMEngine.submit`` on the caller's thread (the API's worker thread), never the engine
thread: a large schema costs its sender the time, and llguidance releases the GIL while it
builds a grammar, so the other requests' steps go on. llguidance builds its lexer lazily, so
``prepare`` also computes the first mask and feeds a few allowed tokens (:data:`PROBE_TOKENS`)
under :data:`LIMITS`: a regex such as ``((a{100}){100}){100}`` fails there, in a few
milliseconds, instead of in the engine's step. Concurrent requests for a structure being
compiled wait for that one compile (single flight); the cache is bounded by count and by an
estimate of its bytes.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from engine.structured.params import StructuredOutputError, StructuredOutputsParams
from engine.structured.rewrite import any_json_object, ascii_classes, bounded_schema
from engine.structured.satisfiable import infinite_only, json_blocks

CACHE_SIZE = 256
"""Compiled grammars kept at most (least recently used dropped first): each as a matcher that
is never advanced; every request gets its own ``deep_copy`` (microseconds, where building a
matcher from a large schema's grammar takes milliseconds)."""
CACHE_BYTES = 256 * 1024**2
"""Estimated bytes the cached grammars may hold together (256 MiB); an entry's estimate is
the process's resident-memory growth while it compiled, at least :data:`MIN_ENTRY_BYTES`
plus 16 bytes per character of its structure. An entry over a quarter of it is not kept."""
MIN_ENTRY_BYTES = 64 * 1024
WHITESPACE = r"[\x20\x0A\x0D\x09]{1,24}"
"""JSON whitespace the model may write between two tokens (vLLM's default lets it write any
whitespace; a small model forced into compact JSON loops inside values). At most 24
characters in a row, so it cannot loop on whitespace; ``disable_any_whitespace`` makes the
output compact (``{"a":1}``). A schema's own ``x-guidance`` options override these."""
LIMIT_VALUES = {"initial_lexer_fuel": 200_000, "step_lexer_fuel": 200_000,
                "max_lexer_states": 20_000, "max_grammar_size": 400_000,
                "verbose_errors": False}
"""llguidance's resource limits (``LLParserLimits``): lexer fuel at build (about 4 ms) and per
step (about 14 ms), at most 20,000 lexer states (1-2 kB each), 400,000 grammar symbols; and
errors without the parser's internal state."""
NO_TEXT = "NoExtensionBias"
"""llguidance's error when no lexeme can start: the structure matches nothing."""
PROBE_TOKENS = 2
"""Tokens fed to a fresh grammar at compile time (the lowest allowed id each time), so its
lexer meets its first derivatives off the engine thread."""


@dataclass
class CompileStats:
    """Counts of :class:`GrammarCompiler` (for the bench and the metrics).

    Attributes:
        hits, misses: cache lookups that found a grammar / had to compile one.
        waits: lookups that waited for the same structure's compile in another thread.
        last_compile_s: seconds the last compile took (grammar, validation, first masks).
        tokenizer_s: seconds building llguidance's tokenizer took (once per engine).
        cache_bytes: the cached grammars' estimated bytes.
    """

    hits: int = 0
    misses: int = 0
    waits: int = 0
    last_compile_s: float = 0.0
    tokenizer_s: float = 0.0
    cache_bytes: int = 0


class _Flight:
    """One compile in progress: the threads that want the same structure wait on ``done``."""

    def __init__(self):
        self.done = threading.Event()
        self.template = None
        self.error: StructuredOutputError | None = None


class GrammarCompiler:
    """Compiles structures into llguidance grammars for one tokenizer, with a cache.

    Args:
        hf_tokenizer: the model's fast Hugging Face tokenizer.
        vocab_size: width of the model's logits (may exceed the tokenizer's vocabulary; the
            extra ids are never allowed).

    Raises:
        ImportError: llguidance is not installed (from the first :meth:`matcher_for`).
    """

    def __init__(self, hf_tokenizer, vocab_size: int):
        self.hf_tokenizer, self.vocab_size = hf_tokenizer, vocab_size
        self.stats = CompileStats()
        self._ll_tokenizer = None
        self._limits = None
        self._cache: OrderedDict[tuple, tuple[object, int]] = OrderedDict()
        self._flights: dict[tuple, _Flight] = {}
        self._lock = threading.Lock()

    @property
    def ll_tokenizer(self):
        """llguidance's view of the tokenizer (built on first use: about 1 s)."""
        if self._ll_tokenizer is None:
            with self._lock:
                if self._ll_tokenizer is None:
                    import llguidance.hf

                    start = time.perf_counter()
                    self._ll_tokenizer = llguidance.hf.from_tokenizer(
                        self.hf_tokenizer, n_vocab=self.vocab_size)
                    self.stats.tokenizer_s = time.perf_counter() - start
        return self._ll_tokenizer

    @property
    def limits(self):
        """The ``llguidance.LLParserLimits`` of every grammar (:data:`LIMIT_VALUES`)."""
        if self._limits is None:
            import llguidance

            self._limits = llguidance.LLParserLimits(**LIMIT_VALUES)
        return self._limits

    @property
    def eos_token_id(self) -> int:
        """The token a complete structure ends with (the tokenizer's EOS)."""
        return int(self.ll_tokenizer.eos_token)

    def prepare(self, params: StructuredOutputsParams):
        """The compiled, never-advanced matcher of ``params``, from the cache when it was seen
        (compiled and cached otherwise; a thread asking while another compiles the same
        structure waits for that compile).

        Raises:
            StructuredOutputError: the schema, regex or grammar does not compile, is over a
                limit, or matches no text or only endless text; the message names the field
                (``structured_outputs.regex``) and the reason.
        """
        key = params.key()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.stats.hits += 1
                return hit[0]
            flight = self._flights.get(key)
            owner = flight is None
            if owner:
                flight = self._flights[key] = _Flight()
            else:
                self.stats.waits += 1
        if not owner:
            flight.done.wait()
            if flight.error is not None:
                raise StructuredOutputError(flight.error.field, flight.error.detail)
            return flight.template
        try:
            flight.template = self._build(params, key)
            return flight.template
        except StructuredOutputError as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()

    def _build(self, params: StructuredOutputsParams, key: tuple):
        """Compile, check and cache one structure (see :meth:`prepare`)."""
        import llguidance

        start, rss = time.perf_counter(), _resident_bytes()
        grammar = self._compile(params)
        template = llguidance.LLMatcher(self.ll_tokenizer, grammar, log_level=0,
                                        limits=self.limits)
        self._first_masks(template, params.field)
        elapsed = time.perf_counter() - start
        size = max(_resident_bytes() - rss, MIN_ENTRY_BYTES + 16 * len(key[1]))
        with self._lock:
            self.stats.misses += 1
            self.stats.last_compile_s = elapsed
            if size <= CACHE_BYTES // 4:
                self._cache[key] = (template, size)
                self.stats.cache_bytes += size
            while self._cache and (len(self._cache) > CACHE_SIZE
                                   or self.stats.cache_bytes > CACHE_BYTES):
                self.stats.cache_bytes -= self._cache.popitem(last=False)[1][1]
        return template

    def _first_masks(self, template, field: str) -> None:
        """Compute the first mask and feed :data:`PROBE_TOKENS` tokens to a copy.

        Raises:
            StructuredOutputError: a limit or grammar error, or a structure that matches no
                text (only EOS allowed at the start, and the empty text is not a match).
        """
        import numpy as np

        bits = np.unpackbits(np.frombuffer(template.compute_bitmask(), dtype=np.uint8),
                             bitorder="little")
        eos = self.eos_token_id
        allowed = np.flatnonzero(bits[:self.vocab_size])
        nothing = template.is_error() and NO_TEXT in template.get_error()
        if nothing or not template.is_error() and not template.is_accepting() \
                and all(int(t) == eos for t in allowed):
            raise StructuredOutputError(field, "matches no text (nothing can satisfy it)")
        _raise_if_error(template, field)
        probe = template.deep_copy()
        for _ in range(PROBE_TOKENS):
            token = next((int(t) for t in allowed if int(t) != eos), None)
            if token is None or probe.is_stopped():
                return
            probe.consume_token(token)
            bits = np.unpackbits(np.frombuffer(probe.compute_bitmask(), dtype=np.uint8),
                                 bitorder="little")
            _raise_if_error(probe, field)
            allowed = np.flatnonzero(bits[:self.vocab_size])

    def _compile(self, params: StructuredOutputsParams) -> str:
        import llguidance

        m = llguidance.LLMatcher
        kind, field = params.kind, params.field
        options = {"whitespace_flexible": False} if params.disable_any_whitespace else \
            {"whitespace_flexible": True, "whitespace_pattern": WHITESPACE}
        rewritten = ascii_classes(params.regex) if kind == "regex" else None

        def short(text: str) -> str:  # the user's own pattern in the message, not its rewrite
            if rewritten and rewritten != params.regex:
                text = text.replace(rewritten, params.regex)
            return _short(text)

        try:
            if kind == "json":
                schema = bounded_schema(params.json)
                if infinite_only(schema):
                    raise StructuredOutputError(field, "no finite JSON value satisfies it (a "
                                                "required $ref cycle)")
                grammar = m.grammar_from_json_schema(json.dumps(schema), defaults=options)
            elif kind == "json_object":
                grammar = m.grammar_from_json_schema(json.dumps(any_json_object()),
                                                     defaults=options)
            elif kind == "regex":
                grammar = m.grammar_from_regex(rewritten)
            elif kind == "choice":
                grammar = m.grammar_from_lark(
                    "start: " + " | ".join(json.dumps(c) for c in params.choice))
            else:
                if any(infinite_only(s) for s in json_blocks(params.grammar)):
                    raise StructuredOutputError(field, "a %json schema in it has no finite "
                                                "value (a required $ref cycle)")
                grammar = llguidance.grammar_from("grammar", params.grammar)
        except (ValueError, RecursionError) as exc:
            if isinstance(exc, StructuredOutputError):
                raise
            raise StructuredOutputError(field, short(str(exc))) from None
        error = m.validate_grammar(grammar, self.ll_tokenizer, limits=self.limits)
        if error:
            raise StructuredOutputError(field, short(error))
        return grammar

    def matcher_for(self, params: StructuredOutputsParams):
        """A fresh ``llguidance.LLMatcher`` for one sequence of a request (a copy of the
        cached one).

        Raises:
            StructuredOutputError: as :meth:`prepare`.
        """
        template = self.prepare(params)
        with self._lock:
            return template.deep_copy()

    def valid_prefix(self, params: StructuredOutputsParams, token_ids: list[int]) -> int:
        """How many leading tokens of ``token_ids`` the structure accepts: ``len(token_ids)``
        when all of them, else the index of the first token that breaks it (an answer written
        without the mask, checked against it).

        Raises:
            StructuredOutputError: as :meth:`prepare`.
        """
        return int(self.matcher_for(params).validate_tokens(list(token_ids)))


def _raise_if_error(matcher, field: str) -> None:
    if matcher.is_error():
        raise StructuredOutputError(field, _short(matcher.get_error()))


def _resident_bytes() -> int:
    """The process's resident memory in bytes (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    except (OSError, ValueError, IndexError):
        return 0


def _short(message: str) -> str:
    """llguidance's reason cut to its first lines (its messages can echo the whole grammar or
    the parser's state)."""
    message = message.split("<state>")[0].split("<non-verbose/>")[0].strip()
    lines = [ln for ln in message.splitlines() if ln.strip()][:4]
    text = " ".join(ln.strip() for ln in lines)
    return text if len(text) <= 300 else text[:297] + "..."
