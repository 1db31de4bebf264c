"""Grammars from structures, compiled once per structure and cached (llguidance).

llguidance (the guidance project's Rust engine, one of vLLM's structured-output backends)
turns a JSON schema, a regex, a Lark or GBNF grammar into a grammar over bytes and, with the
model's tokenizer, computes at each step the bitmask of tokens that keep the output valid
(Earley parsing over a lexer of derivative-based regexes; see its docs/ on GitHub).

Compiling happens in :meth:`GrammarCompiler.prepare`, called through ``matcher_for`` by ``LLMEngine.submit`` on
the caller's thread, not the engine thread: a large schema costs its sender the time, and
llguidance releases the GIL while it builds a grammar, so the other requests' steps go on.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from engine.structured.params import StructuredOutputError, StructuredOutputsParams

CACHE_SIZE = 256
"""Compiled grammars kept (least recently used dropped first): each as a fresh matcher that is
never advanced; every request gets its own ``deep_copy`` (microseconds, where building a
matcher from a large schema's grammar takes milliseconds)."""
JSON_OPTIONS = {"whitespace_flexible": False}
"""JSON comes out compact (``{"a":1}``): no free whitespace for a small model to loop in.
A schema's own ``x-guidance`` options override it (llguidance's rule)."""


@dataclass
class CompileStats:
    """Counts of :class:`GrammarCompiler` (for the bench and the metrics).

    Attributes:
        hits, misses: cache lookups that found a grammar / had to compile one.
        last_compile_s: seconds the last compile took (grammar text, validation, matcher).
        tokenizer_s: seconds building llguidance's tokenizer took (once per engine).
    """

    hits: int = 0
    misses: int = 0
    last_compile_s: float = 0.0
    tokenizer_s: float = 0.0


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
        self._cache: OrderedDict[tuple[str, str], object] = OrderedDict()
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
    def eos_token_id(self) -> int:
        """The token a complete structure ends with (the tokenizer's EOS)."""
        return int(self.ll_tokenizer.eos_token)

    def prepare(self, params: StructuredOutputsParams):
        """The compiled, never-advanced matcher of ``params``, from the cache when it was seen
        (compiled and cached otherwise).

        Raises:
            StructuredOutputError: the schema, regex or grammar does not compile; the message
                names the field (``structured_outputs.regex``) and llguidance's reason.
        """
        key = params.key()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.stats.hits += 1
                return hit
        import llguidance

        start = time.perf_counter()
        template = llguidance.LLMatcher(self.ll_tokenizer, self._compile(params), log_level=0)
        if template.is_error():
            raise StructuredOutputError(params.field, _short(template.get_error()))
        elapsed = time.perf_counter() - start
        with self._lock:
            self.stats.misses += 1
            self.stats.last_compile_s = elapsed
            self._cache[key] = template
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return template

    def _compile(self, params: StructuredOutputsParams) -> str:
        import llguidance

        m = llguidance.LLMatcher
        kind, field = params.kind, params.field
        try:
            if kind == "json":
                grammar = m.grammar_from_json_schema(json.dumps(params.json), defaults=JSON_OPTIONS)
            elif kind == "json_object":
                grammar = m.grammar_from_json_schema('{"type": "object"}', defaults=JSON_OPTIONS)
            elif kind == "regex":
                grammar = m.grammar_from_regex(params.regex)
            elif kind == "choice":
                grammar = m.grammar_from_lark(
                    "start: " + " | ".join(json.dumps(c) for c in params.choice))
            else:
                grammar = llguidance.grammar_from("grammar", params.grammar)
        except ValueError as exc:
            raise StructuredOutputError(field, _short(str(exc))) from None
        error = m.validate_grammar(grammar, self.ll_tokenizer)
        if error:
            raise StructuredOutputError(field, _short(error))
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


def _short(message: str) -> str:
    """llguidance's reason cut to its first lines (its messages can echo the whole grammar)."""
    message = message.split("<state>")[0].strip()
    lines = [ln for ln in message.splitlines() if ln.strip()][:4]
    text = " ".join(ln.strip() for ln in lines)
    return text if len(text) <= 300 else text[:297] + "..."
