"""Structured output: constrain decoding to a JSON schema, any JSON object, a regex, a list of
choices or a grammar (vLLM's ``structured_outputs``), with llguidance building the masks.

- :mod:`engine.structured.params`: :class:`StructuredOutputsParams`, the request's structure.
- :mod:`engine.structured.compiler`: grammars compiled once per structure and cached.
- :mod:`engine.structured.rewrite`: ASCII ``\\d \\w \\s``, bounded numbers, a depth limit.
- :mod:`engine.structured.satisfiable`: schemas with no finite instance, found before a step.
- :mod:`engine.structured.state`: one sequence's matcher and counts.
- :mod:`engine.structured.masking`: the runner's masks on the raw logits, and jump-forward.
- :mod:`engine.structured.bookkeeping`: appending forced tokens; their event fields.
- :mod:`engine.structured.engine_part`: the engine's part (compile at submit, free at finish).
"""

from engine.structured.params import KINDS, StructuredOutputError, StructuredOutputsParams

__all__ = ["KINDS", "StructuredOutputError", "StructuredOutputsParams"]
