"""One side's settings of a comparison, and their checks (refusals name the side and field).

A side is a plain dict from the page or the API (``{"temperature": 0, "weights": "int4"}``);
:func:`parse_side` checks each field and fills the rest from :data:`DEFAULTS`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine import SamplingParams

from app.render.structured import structure_from
from app.server import fields

WEIGHTS = ("auto", "int4", "bf16", "fp32")
"""``auto``: the served model's weights; the others load a second engine when they differ."""
KV_DTYPES = ("auto", "bf16", "fp8")
"""``auto``: the served engine's KV cache dtype; the others load a second engine when they differ."""
PREFIX = ("cold", "warm")
"""``cold``: a fresh prefix-cache salt, nothing cached; ``warm``: the prompt runs once first."""
LOCAL_ONLY = ("weights", "speculative", "use_kv_cache", "kv_cache_dtype", "prefix_cache", "json_schema")
"""Fields only this engine can honour (a remote server compares sampling settings only)."""
ENGINES = ("local", "remote")
"""``remote``: the OpenAI-compatible server the page was given beside its own engine."""
MAX_TOKENS_CAP = 1024


@dataclass(frozen=True)
class SideSettings:
    """What one side runs with (vLLM's names where they exist).

    Attributes:
        temperature, top_p, top_k, seed, max_tokens: sampling (``seed`` ``None``: random).
        weights: one of :data:`WEIGHTS`; kv_cache_dtype: one of :data:`KV_DTYPES`.
        speculative: prompt-lookup drafts (``ngram``, k = the engine's default).
        use_kv_cache: False recomputes the whole sequence at every step.
        prefix_cache: one of :data:`PREFIX`.
        json_schema: a JSON schema the answer must follow (``""``: free text).
        engine: one of :data:`ENGINES`.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_tokens: int = 64
    weights: str = "auto"
    speculative: bool = False
    use_kv_cache: bool = True
    kv_cache_dtype: str = "auto"
    prefix_cache: str = "cold"
    json_schema: str = ""
    engine: str = "local"

    def params(self) -> SamplingParams:
        """The request's :class:`SamplingParams` (a JSON schema as ``structured_outputs``).

        Raises:
            ValueError: a value out of range or a schema that is not JSON (the field named).
        """
        params = SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                                seed=self.seed, max_tokens=self.max_tokens)
        structure = structure_from("json", self.json_schema) if self.json_schema.strip() else None
        return dataclasses.replace(params, structured_outputs=structure) if structure else params

    def summary(self) -> str:
        """The fields that differ from :data:`DEFAULTS`, short (``"temperature 1, seed 0"``;
        ``"defaults"`` when none; a schema as ``json_schema``)."""
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != getattr(DEFAULTS, f.name):
                parts.append(f.name if f.name == "json_schema" else f"{f.name} {value:g}"
                             if isinstance(value, float) else f"{f.name} {value}")
        return ", ".join(parts) or "defaults (greedy)"

    def as_dict(self) -> dict:
        """The settings as the API takes them."""
        return dataclasses.asdict(self)


DEFAULTS = SideSettings()
FIELDS = tuple(f.name for f in dataclasses.fields(SideSettings))


def _choice(name: str, value, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {fields.shown(value)}")
    return value


def parse_side(side: str, value, max_tokens: int | None = None, remote: bool = False,
               peer: bool = False) -> SideSettings:
    """Check one side's settings.

    Args:
        side: ``"left"`` or ``"right"`` (named in refusals: ``"right.weights must be ..."``).
        value: a dict of :class:`SideSettings` fields (missing ones take the defaults), or ``None``.
        max_tokens: the comparison's max_tokens, used where the side gives none.
        remote: the engine is a remote server: the fields of :data:`LOCAL_ONLY` must keep their
            defaults.
        peer: a remote server stands beside the local engine (``engine: "remote"`` allowed).

    Raises:
        ValueError: a field unknown, of the wrong type or out of range; the message starts
            with ``side.field``.
    """
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise ValueError(f"{side} must be a JSON object of settings, got {fields.shown(value)}")
    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        raise ValueError(f"{side}.{unknown[0]} is not a setting: use {', '.join(FIELDS)}")
    try:
        return _parse(side, value, max_tokens, remote, peer)
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith(side + ".") else f"{side}.{msg}") from None


def _parse(side: str, v: dict, max_tokens: int | None, remote: bool, peer: bool) -> SideSettings:
    d = DEFAULTS
    seed = v.get("seed", d.seed)
    if seed is not None:
        seed = fields.whole("seed", seed)
        seed = None if seed < 0 else seed
    tokens = v.get("max_tokens", max_tokens if max_tokens is not None else d.max_tokens)
    tokens = fields.whole("max_tokens", tokens)
    if not 1 <= tokens <= MAX_TOKENS_CAP:
        raise ValueError(f"max_tokens must be in [1, {MAX_TOKENS_CAP}], got {tokens}")
    s = SideSettings(
        temperature=fields.number("temperature", v.get("temperature", d.temperature)),
        top_p=fields.number("top_p", v.get("top_p", d.top_p)),
        top_k=fields.whole("top_k", v.get("top_k", d.top_k)),
        seed=seed, max_tokens=tokens,
        weights=_choice("weights", v.get("weights", d.weights), WEIGHTS),
        speculative=fields.flag("speculative", v.get("speculative", d.speculative)),
        use_kv_cache=fields.flag("use_kv_cache", v.get("use_kv_cache", d.use_kv_cache)),
        kv_cache_dtype=_choice("kv_cache_dtype", v.get("kv_cache_dtype", d.kv_cache_dtype), KV_DTYPES),
        prefix_cache=_choice("prefix_cache", v.get("prefix_cache", d.prefix_cache), PREFIX),
        json_schema=fields.text("json_schema", v.get("json_schema", d.json_schema), default=""),
        engine=_choice("engine", v.get("engine", d.engine), ENGINES if peer else ("local",)),
    )
    if remote or s.engine == "remote":
        for name in LOCAL_ONLY:
            if getattr(s, name) != getattr(d, name):
                raise ValueError(f"{name} needs this page's own engine: a remote server compares "
                                 f"sampling settings only (temperature, top_p, top_k, seed, max_tokens)")
    if s.speculative and not s.use_kv_cache:
        raise ValueError("speculative needs use_kv_cache true: drafts are verified against the cache")
    try:
        s.params()  # the ranges (SamplingParams names the field) and the schema's JSON
    except ValueError as exc:
        if str(exc).startswith("structured output"):
            raise ValueError(f"json_schema is not a usable schema ({exc})") from None
        raise
    return s
