"""Per-request latency metrics, with vLLM's definitions (see docs/metrics.md, "Request timings").

Every time is a ``time.perf_counter()`` reading in seconds on the engine host, recorded once by
the engine; each metric below is computed in one place from those readings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RequestTimes:
    """Raw timestamps of one request (``time.perf_counter()`` seconds).

    Attributes:
        arrival: when ``submit`` accepted the request.
        scheduled: when the scheduler first picked it (prefill began).
        token_times: when each output token became available, in order.
        finished: when the request ended (any finish reason).
    """

    arrival: float
    scheduled: float | None = None
    token_times: list[float] = field(default_factory=list)
    finished: float | None = None


@dataclass
class RequestMetrics:
    """Latency and throughput of one request (vLLM definitions, all in seconds or tokens/s).

    Attributes:
        queue_time_s: scheduled − arrival.
        ttft_s: first token time − arrival (time to first token).
        prefill_time_s: first token time − scheduled.
        itl_s: inter-token latencies, one per output token after the first.
        tpot_s: decode time / (output tokens − 1); 0 when at most one token.
        decode_time_s: last token time − first token time.
        e2e_s: finished − arrival.
        prompt_tokens, output_tokens: token counts.
        cached_prompt_tokens: prompt tokens whose keys and values came from the prefix cache
            (vLLM reports them apart as ``num_cached_tokens``).
        computed_prompt_tokens: prompt tokens the prefill computed: prompt − cached.
        prefill_tokens_per_s: computed prompt tokens / prefill time (0 when undefined); cached
            tokens cost no compute, so counting them would inflate the speed.
        decode_tokens_per_s: (output tokens − 1) / decode time (0 when undefined).
    """

    queue_time_s: float = 0.0
    ttft_s: float = 0.0
    prefill_time_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    tpot_s: float = 0.0
    decode_time_s: float = 0.0
    e2e_s: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_prompt_tokens: int = 0
    computed_prompt_tokens: int = 0
    prefill_tokens_per_s: float = 0.0
    decode_tokens_per_s: float = 0.0

    @classmethod
    def from_times(cls, times: RequestTimes, prompt_tokens: int,
                   cached_prompt_tokens: int = 0) -> "RequestMetrics":
        """Compute every metric from the request's timestamps.

        Args:
            times: the recorded timestamps; ``scheduled``/``finished`` may be ``None`` for a
                request that never ran (then the missing times count as zero-length).
            prompt_tokens: prompt length in tokens.
            cached_prompt_tokens: of those, tokens served from the prefix cache (clamped to
                ``[0, prompt_tokens]``).
        """
        arrival = times.arrival
        scheduled = times.scheduled if times.scheduled is not None else arrival
        finished = times.finished if times.finished is not None else scheduled
        toks = times.token_times
        n = len(toks)
        cached = min(max(0, int(cached_prompt_tokens)), prompt_tokens)
        m = cls(prompt_tokens=prompt_tokens, output_tokens=n, cached_prompt_tokens=cached,
                computed_prompt_tokens=prompt_tokens - cached)
        m.queue_time_s = scheduled - arrival
        m.e2e_s = finished - arrival
        if n:
            m.ttft_s = toks[0] - arrival
            m.prefill_time_s = toks[0] - scheduled
            m.decode_time_s = toks[-1] - toks[0]
            m.itl_s = [b - a for a, b in zip(toks, toks[1:])]
        if n > 1 and m.decode_time_s > 0:
            m.tpot_s = m.decode_time_s / (n - 1)
            m.decode_tokens_per_s = (n - 1) / m.decode_time_s
        if n and m.prefill_time_s > 0:
            m.prefill_tokens_per_s = m.computed_prompt_tokens / m.prefill_time_s
        return m

    def to_dict(self) -> dict:
        """A JSON-ready dict with the field names above."""
        return asdict(self)
