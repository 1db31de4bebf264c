"""The numbers of a decoder-only transformer that decide its memory: layers, heads, sizes.

``ModelSpec`` is read from a model's ``config.json`` (a dict) or a transformers config object and
answers two questions with the formulas of docs/metrics.md ("The KV cache"): how many bytes the
KV cache holds for T tokens, and how many parameters the weights have.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: float) -> int:
    """The KV formula per token: 2 (K and V) × layers × kv_heads × head_dim × dtype bytes.

    Source: docs/metrics.md, "The KV cache". Multiply by tokens and batch for a whole cache.
    """
    return int(round(2 * layers * kv_heads * head_dim * dtype_bytes))

# Families whose attention projections q/k/v carry a bias without a config flag saying so.
_QKV_BIAS_TYPES = {"qwen2"}
# Families with four RMSNorms per block (before/after attention and MLP).
_FOUR_NORM_TYPES = {"gemma2", "gemma3", "gemma3_text"}
# Families with per-head RMSNorm on queries and keys (each of size head_dim).
_QK_NORM_TYPES = {"gemma3", "gemma3_text", "qwen3", "olmo2"}


def _get(d: dict, *names, default=None):
    """The first of ``names`` present in ``d`` with a non-None value, else ``default``."""
    for n in names:
        if d.get(n) is not None:
            return d[n]
    return default


LIMITS = {"layers": 100_000, "heads": 100_000, "kv_heads": 100_000, "head_dim": 10_000_000,
          "hidden": 10_000_000, "intermediate": 100_000_000, "vocab": 100_000_000,
          "positions": 1_000_000_000}
"""Largest value each field of a config may hold: far beyond any published model, small enough
that the formulas' products stay exact integers (a pasted 1e300 would overflow them)."""


def _count(d: dict, names: tuple[str, ...], what: str, default=None, minimum: int = 1) -> int:
    """The first of ``names`` in ``d`` as a whole number in ``[minimum, LIMITS[what]]``.

    Raises:
        ValueError: the value is not a whole number or out of range; the message names the key.
    """
    key = next((n for n in names if d.get(n) is not None), None)
    value = d[key] if key else default
    key = key or names[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or (isinstance(value, float) and (value in (float("inf"), float("-inf"))
                                              or not value.is_integer())):
        raise ValueError(f"{key} must be a whole number, got {value!r}")
    if not minimum <= value <= LIMITS[what]:
        shown = f"{value:,}" if abs(value) < 1e15 else f"{value:.3g}"
        raise ValueError(f"{key} must be between {minimum} and {LIMITS[what]:,}, got {shown}")
    return int(value)


def _as_dict(config) -> dict:
    """A plain dict of config fields from a dict or a transformers ``PretrainedConfig``."""
    if isinstance(config, dict):
        d = dict(config)
        if isinstance(d.get("text_config"), dict):  # multimodal wrapper: the decoder's numbers
            d = {**d, **d["text_config"]}
        return d
    if hasattr(config, "get_text_config"):
        config = config.get_text_config(decoder=True)
    return config.to_dict()


def _sliding(d: dict, model_type: str, layers: int) -> tuple[int | None, int]:
    """(window, number of sliding-window layers), following transformers' layer types.

    An explicit ``layer_types`` list wins; else a set ``sliding_window`` means every layer slides,
    except Gemma 2 (every other layer, starting with the first), Gemma 3 (5 of every 6) and
    Qwen2 (only with ``use_sliding_window``, from ``max_window_layers`` on).
    """
    window = d.get("sliding_window")
    if model_type == "qwen2" and not d.get("use_sliding_window", False):
        window = None
    if window is not None:
        window = _count(d, ("sliding_window",), "positions")
    types = d.get("layer_types")
    if types:
        n = sum(1 for t in types[:layers] if t in ("sliding_attention", "chunked_attention"))
        return (window if n else None), n
    if not window:
        return None, 0
    if model_type == "gemma2":
        return window, sum(1 for i in range(layers) if (i + 1) % 2)
    if model_type in ("gemma3", "gemma3_text"):
        pattern = int(d.get("sliding_window_pattern", 6))
        return window, sum(1 for i in range(layers) if (i + 1) % pattern)
    if model_type == "qwen2":
        return window, max(0, layers - int(d.get("max_window_layers", layers)))
    return window, layers


def _fmt(x: float) -> str:
    """A number with thousands separators; no ``.0`` for whole numbers."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,}"


@dataclass
class ModelSpec:
    """Architecture numbers of one model (all sizes in elements, not bytes).

    Attributes:
        name: model id or path. architecture: the ``architectures[0]`` class or the model type.
        layers, heads, kv_heads: decoder blocks, query heads, key/value heads (GQA/MQA).
        head_dim: explicit config ``head_dim`` when present, else hidden_size / heads.
        hidden_size, intermediate_size, vocab_size, max_positions: as in the config.
        tie_word_embeddings: the LM head shares the input embedding matrix.
        sliding_window: tokens a sliding-window layer keeps, ``None`` without one;
        sliding_layers: how many layers use that window.
        num_params: the published parameter count when known, else ``None``.
        source: where the numbers came from.
        The remaining fields only refine :meth:`weight_count`.
    """

    name: str
    architecture: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_positions: int
    tie_word_embeddings: bool
    sliding_window: int | None
    sliding_layers: int
    num_params: int | None
    source: str
    model_type: str = ""
    mlp_matrices: int = 3  # gated MLP (gate, up, down); 2 for GPT-2's fc/proj
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    norms_per_layer: int = 2
    norm_params: int = 1  # 1 for RMSNorm (weight), 2 for LayerNorm (weight and bias)
    qk_norm: bool = False
    learned_positions: bool = False
    layer_types: list[str] = field(default_factory=list)

    @classmethod
    def from_config(cls, config, name: str = "", source: str = "") -> "ModelSpec":
        """Build a spec from a ``config.json`` dict or a transformers ``PretrainedConfig``.

        Reads Llama-style names (``num_hidden_layers``, ``num_attention_heads``,
        ``num_key_value_heads``, ``hidden_size``, ``intermediate_size``) and GPT-2's (``n_layer``,
        ``n_head``, ``n_embd``, ``n_positions``, ``n_inner`` = None meaning 4 × n_embd).

        Raises:
            ValueError: a missing layers, heads or hidden size (the keys named); a field that is
                not a whole number or outside :data:`LIMITS`; query heads not a multiple of the
                KV heads, or a hidden size the heads don't divide when ``head_dim`` is absent.
        """
        d = _as_dict(config)
        mt = str(d.get("model_type") or "")
        gpt2 = mt == "gpt2" or "n_embd" in d
        missing = [names[0] for names in (("num_hidden_layers", "n_layer"),
                                          ("num_attention_heads", "n_head"),
                                          ("hidden_size", "n_embd"))
                   if _get(d, *names) is None]
        if missing:
            raise ValueError(f"{name or 'the config'} lacks {', '.join(missing)}")
        layers = _count(d, ("num_hidden_layers", "n_layer"), "layers")
        heads = _count(d, ("num_attention_heads", "n_head"), "heads")
        hidden = _count(d, ("hidden_size", "n_embd"), "hidden")
        kv_heads = _count(d, ("num_key_value_heads",), "kv_heads", default=heads)
        if heads % kv_heads:
            raise ValueError(f"num_attention_heads ({heads}) must be a multiple of "
                             f"num_key_value_heads ({kv_heads})")
        if _get(d, "head_dim") is None and hidden % heads:
            raise ValueError(f"hidden_size ({hidden}) must be a multiple of num_attention_heads "
                             f"({heads}) when head_dim is not given")
        head_dim = _count(d, ("head_dim",), "head_dim", default=hidden // heads)
        inter = _count(d, ("intermediate_size", "n_inner"), "intermediate", default=4 * hidden)
        vocab = _count(d, ("vocab_size",), "vocab", default=0, minimum=0)
        positions = _count(d, ("max_position_embeddings", "n_positions"), "positions", default=0,
                           minimum=0)
        window, n_sliding = _sliding(d, mt, layers)
        archs = d.get("architectures") or [mt or "unknown"]
        return cls(
            name=name or str(d.get("_name_or_path") or ""),
            architecture=str(archs[0]),
            layers=layers,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            hidden_size=hidden,
            intermediate_size=inter,
            vocab_size=vocab,
            max_positions=positions,
            tie_word_embeddings=bool(d.get("tie_word_embeddings", True if gpt2 else False)),
            sliding_window=window,
            sliding_layers=n_sliding,
            num_params=d.get("num_params"),
            source=source,
            model_type=mt,
            mlp_matrices=2 if gpt2 else 3,
            qkv_bias=gpt2 or mt in _QKV_BIAS_TYPES or bool(d.get("attention_bias")),
            out_bias=gpt2 or bool(d.get("attention_bias")),
            mlp_bias=gpt2 or bool(d.get("mlp_bias")),
            norms_per_layer=4 if mt in _FOUR_NORM_TYPES else 2,
            norm_params=2 if gpt2 else 1,
            qk_norm=mt in _QK_NORM_TYPES,
            learned_positions=gpt2,
            layer_types=list(d.get("layer_types") or []),
        )

    def kv_bytes_per_token(self, dtype_bytes: float) -> int:
        """Bytes one token adds to a full-attention KV cache (:func:`kv_bytes_per_token`).
        Sliding layers stop growing past the window."""
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, dtype_bytes)

    def kv_cache_bytes(self, tokens: int, dtype_bytes: float, batch: int = 1) -> int:
        """KV cache bytes for ``batch`` sequences of ``tokens`` tokens each.

        2 × kv_heads × head_dim × dtype_bytes × batch × (full layers × tokens + sliding layers ×
        min(tokens, window)). transformers' dynamic sliding layer keeps window − 1 tokens between
        steps, so for such layers this is an upper bound by one token.
        """
        full = self.layers - self.sliding_layers
        kept = tokens if self.sliding_window is None else min(tokens, self.sliding_window)
        elems = 2 * self.kv_heads * self.head_dim * batch * (full * tokens + self.sliding_layers * kept)
        return int(round(elems * dtype_bytes))

    def weight_count(self) -> int:
        """Parameters: ``num_params`` when known, else counted from the architecture.

        Embedding V·h (+ learned positions P·h), per layer the attention projections
        h·(heads·d) + 2·h·(kv_heads·d) + (heads·d)·h with optional biases, the MLP (3·h·I gated,
        2·h·I for GPT-2, optional biases), the norms, then a final norm and an untied LM head V·h.
        """
        if self.num_params:
            return int(self.num_params)
        h, inter = self.hidden_size, self.intermediate_size
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h
        attn += (q + 2 * kv if self.qkv_bias else 0) + (h if self.out_bias else 0)
        mlp = self.mlp_matrices * h * inter
        mlp += ((self.mlp_matrices - 1) * inter + h) if self.mlp_bias else 0
        norms = self.norms_per_layer * h * self.norm_params + (2 * self.head_dim if self.qk_norm else 0)
        total = self.vocab_size * h + self.layers * (attn + mlp + norms) + h * self.norm_params
        total += self.max_positions * h if self.learned_positions else 0
        total += 0 if self.tie_word_embeddings else self.vocab_size * h
        return total

    def formula_text(self, dtype_bytes: float, tokens: int | None = None, batch: int = 1,
                     samples: int = 1, shared_tokens: int = 0) -> str:
        """The KV formula with this model's numbers, written as the product the result comes from.

        Without ``tokens``: ``"2 × 30 layers × 3 KV heads × 64 head_dim × 4 B = 46,080 B per
        token"``. With ``tokens``: the whole cache, ``"... × 2,048 tokens × 1 batch = ... B"``;
        sliding-window layers count at ``min(tokens, window)`` and full layers at ``tokens``
        (``"2 × 4 KV heads × 256 head_dim × 2 B × 1 batch × (13 full layers × 8,192 tokens +
        13 sliding layers × 4,096 tokens) = 654,311,424 B"``). With ``samples`` answers per
        request (beams or parallel samples) each answer holds its own ``tokens − shared_tokens``
        and the ``shared_tokens`` prompt blocks are stored once (0 = no block sharing), as
        :func:`engine.telemetry.estimator.estimate` counts them. Dropping the words leaves
        arithmetic whose value is the printed result.
        """
        if tokens is None:
            head = (f"2 × {self.layers} layers × {self.kv_heads} KV heads × {self.head_dim} head_dim"
                    f" × {_fmt(dtype_bytes)} B")
            return f"{head} = {self.kv_bytes_per_token(dtype_bytes):,} B per token"
        samples = max(1, int(samples))
        if samples == 1:
            return f"{self._kv_term(dtype_bytes, tokens, f'{batch} batch')} = " \
                   f"{self.kv_cache_bytes(tokens, dtype_bytes, batch):,} B"
        shared = max(0, min(int(shared_tokens), tokens))
        own = tokens - shared
        terms, total = [], self.kv_cache_bytes(own, dtype_bytes, batch * samples)
        if shared:
            terms.append(self._kv_term(dtype_bytes, shared, f"{batch} batch"))
            total += self.kv_cache_bytes(shared, dtype_bytes, batch)
        terms.append(self._kv_term(dtype_bytes, own, f"({batch} batch × {samples} answers)"))
        return f"{' + '.join(terms)} = {total:,} B"

    def _kv_term(self, dtype_bytes: float, tokens: int, seqs: str) -> str:
        """One product of :meth:`formula_text`: ``tokens`` per sequence for ``seqs`` sequences."""
        b = _fmt(dtype_bytes)
        if not (self.sliding_layers and self.sliding_window is not None and tokens > self.sliding_window):
            return (f"2 × {self.layers} layers × {self.kv_heads} KV heads × {self.head_dim} head_dim"
                    f" × {b} B × {tokens:,} tokens × {seqs}")
        full = self.layers - self.sliding_layers
        parts = [f"{full} full layers × {tokens:,} tokens"] if full else []
        parts.append(f"{self.sliding_layers} sliding layers × {self.sliding_window:,} tokens")
        layers = parts[0] if len(parts) == 1 else f"({' + '.join(parts)})"
        return f"2 × {self.kv_heads} KV heads × {self.head_dim} head_dim × {b} B × {seqs} × {layers}"
