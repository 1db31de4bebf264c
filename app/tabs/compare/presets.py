"""The Compare tab's presets: one click sets both sides, with a sentence on what to watch."""

from __future__ import annotations

from dataclasses import dataclass, field

PERSON_SCHEMA = ('{"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, '
                 '"age": {"type": "integer"}}, "required": ["name", "age"], '
                 '"additionalProperties": false}')
"""The schema side of "free text vs a JSON schema"."""


@dataclass(frozen=True)
class Preset:
    """Two sides' settings (only the fields that differ from the defaults) and what to watch.

    Attributes:
        key: its id (the API and the tests name it); label: the button's text.
        watch: one sentence on what the comparison shows.
        left, right: :class:`app.tabs.compare.settings.SideSettings` fields for each side.
        prompt: a prompt that shows it best (``""``: keep the one in the box).
        local: needs this page's own engine (hidden in front of a remote server).
        peer: needs a second, remote server beside the local engine.
    """

    key: str
    label: str
    watch: str
    left: dict = field(default_factory=dict)
    right: dict = field(default_factory=dict)
    prompt: str = ""
    local: bool = True
    peer: bool = False


COPY_PROMPT = ("Repeat this list exactly: apples, pears, plums, cherries, apricots, peaches, "
               "grapes, lemons, limes, oranges, figs, dates.")

LONG_PROMPT = (
    "Summarise this passage in one sentence. "
    "A language model writes its answer one token at a time. Before the first token it reads the "
    "whole prompt in one pass, called prefill, and keeps the keys and values of every prompt "
    "token in a cache, so that each later step only computes the newest token and looks back at "
    "the cached ones. Prefill is heavy arithmetic over many tokens at once, and its length "
    "decides how long the reader waits for the first word. Decode is the opposite: each step "
    "does little arithmetic but must read every weight of the model and the whole cache from "
    "memory, so its speed is set by memory bandwidth rather than by the processor's peak. "
    "Servers that answer many people keep one pool of cache blocks and hand them out as answers "
    "grow, the way an operating system hands out pages of memory. When many requests begin with "
    "the same words, a long system prompt or the same document, the blocks that hold those "
    "words can be kept and shared: a new request whose prompt starts the same way skips that part "
    "of the prefill and starts answering sooner. Keeping them costs memory, and a shared cache "
    "can leak timing to other users, so a careful server salts each user's blocks. Quantized "
    "weights, a smaller cache type, batching many users into each step and drafting several "
    "tokens to verify at once are the other levers a server pulls to answer faster and cheaper.")
"""A prompt of about 400 tokens: its prefill takes several chunked steps, so a warm prefix
cache's head start shows in TTFT even with both sides in the same batches."""

PRESETS: tuple[Preset, ...] = (
    Preset("greedy_sampling", "Greedy vs sampling",
           "Greedy takes the most likely token every time; sampling at T = 1.0 (seed 0) draws "
           "from the whole distribution: watch the marked chip, where the answers part.",
           {"temperature": 0.0}, {"temperature": 1.0, "seed": 0}, local=False),
    Preset("int4_bf16", "int4 vs bf16 weights",
           "The same model stored in 4 bits against 16: the weight bytes row shows about 3.5x "
           "less to read per token; watch TPOT and where the greedy answers part.",
           {"weights": "int4"}, {"weights": "bf16"}),
    Preset("kv_on_off", "KV cache on vs off",
           "Without the cache every step recomputes the whole sequence: the right side's "
           "per-token time climbs with the length while the left stays flat.",
           {"use_kv_cache": True, "max_tokens": 128}, {"use_kv_cache": False, "max_tokens": 128}),
    Preset("spec_on_off", "Speculative on vs off",
           "Prompt lookup drafts tokens copied from the prompt and verifies several per pass: "
           "watch the acceptance row and tok/s on a prompt that repeats its input.",
           {"speculative": True}, {"speculative": False}, prompt=COPY_PROMPT),
    Preset("prefix_cold_warm", "Prefix cache cold vs warm",
           "The warm side's long prompt ran once before, so its KV blocks are cached: its prefill "
           "computes only the last few tokens and its TTFT is a fraction of the cold side's.",
           {"prefix_cache": "cold", "max_tokens": 16}, {"prefix_cache": "warm", "max_tokens": 16},
           prompt=LONG_PROMPT),
    Preset("kv_bf16_fp8", "bf16 vs fp8 KV cache",
           "fp8 stores each key and value in one byte instead of two: the KV bytes row halves.",
           {"kv_cache_dtype": "bf16"}, {"kv_cache_dtype": "fp8"}),
    Preset("free_json", "Free text vs a JSON schema",
           "The right side may only write tokens that keep a person object valid JSON: its "
           "answer always parses, the left one rarely does.",
           {}, {"json_schema": PERSON_SCHEMA}, prompt="Describe a fictional person as JSON."),
    Preset("local_remote", "This engine vs the remote server",
           "The same greedy request on this page's engine and on the remote OpenAI-compatible "
           "server: compare TTFT and tok/s (the server's own figures are measured by this client).",
           {}, {"engine": "remote"}, peer=True),
)
BY_KEY = {p.key: p for p in PRESETS}


def shown_presets(remote: bool, peer: bool) -> tuple[Preset, ...]:
    """The presets the page shows: all local ones on this engine (the remote one only with a
    ``peer`` server), only the sampling ones in front of a remote server (``remote``)."""
    if remote:
        return tuple(p for p in PRESETS if not p.local and not p.peer)
    return tuple(p for p in PRESETS if peer or not p.peer)
