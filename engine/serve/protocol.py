"""Request bodies of the OpenAI API (chat and text completions) and their translation into the
engine's :class:`engine.params.SamplingParams`.

The fields are OpenAI's; ``top_k``, ``min_p``, ``repetition_penalty`` and ``ignore_eos`` are
accepted as extra fields, as vLLM does. Fields OpenAI defines that this engine cannot honour
(``echo``, ``suffix``, ``best_of`` other than ``n``, ``logit_bias``, tools) are refused with a
400 naming them rather than silently ignored; unknown fields are ignored, as vLLM does.
Structured output comes as OpenAI's ``response_format`` or vLLM's ``structured_outputs`` /
``guided_*`` fields (:mod:`engine.serve.structured`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.model.prompt import check_text
from engine.params import SamplingParams
from engine.serve.errors import APIError, bad_value
from engine.serve.structured import api_error, structure_of
from engine.structured.params import StructuredOutputError

MAX_N = 16
"""Most choices one request may ask for (``n``); each is an engine request of its own."""
MAX_TOP_LOGPROBS = 5
"""The sampler keeps the 5 most likely tokens of each step (``engine.worker.sampler``)."""
MAX_MESSAGES = 4096
"""Most messages of one chat request (each is checked; 60,000 empty ones cost seconds)."""
PARAM_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                "presence_penalty", "frequency_penalty", "max_tokens", "seed", "stop", "ignore_eos",
                "stop_token_ids")


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a last chunk with the ``usage``."""

    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class _Common(BaseModel):
    """Fields shared by both routes."""

    model_config = ConfigDict(extra="ignore")
    model: str
    max_tokens: int | None = Field(default=None, ge=1, strict=True)
    temperature: float | None = None
    top_p: float | None = None
    n: int = Field(default=1, ge=1, le=MAX_N, strict=True)
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stream: bool = Field(default=False, strict=True)   # "yes" is not a JSON boolean
    stream_options: StreamOptions | None = None
    logit_bias: Any = None  # refused when set; never validated key by key
    user: str | None = None
    # vLLM's extra sampling fields
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = Field(default=None, strict=True)
    prompt_logprobs: Any = None  # refused when set
    # structured output: OpenAI's response_format; vLLM's structured_outputs and guided_*
    response_format: Any = None
    structured_outputs: Any = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None

    def structure(self) -> tuple[dict | None, dict[str, str]]:
        """The structure asked for and its field names (:func:`engine.serve.structured.structure_of`)."""
        return structure_of(self)

    def sampling_params(self, max_tokens: int | None) -> SamplingParams:
        """The engine's settings for this request (OpenAI's defaults where a field is absent:
        temperature 1, top_p 1, no penalties; ``max_tokens`` as the caller passes it, ``None``
        meaning up to the context window).

        Raises:
            APIError: 400 naming the field whose value the engine refuses.
        """
        if self.logit_bias:
            raise APIError(400, "logit_bias is not supported by this engine", "logit_bias",
                           "unsupported")
        if self.prompt_logprobs is not None:
            raise APIError(400, "prompt_logprobs is not supported by this engine (only the "
                           "generated tokens' logprobs are)", "prompt_logprobs", "unsupported")
        values = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                  "min_p": self.min_p, "repetition_penalty": self.repetition_penalty,
                  "presence_penalty": self.presence_penalty,
                  "frequency_penalty": self.frequency_penalty, "seed": self.seed,
                  "stop": self.stop, "stop_token_ids": self.stop_token_ids}
        kwargs = {k: v for k, v in values.items() if v is not None}
        structure, fields = self.structure()
        try:
            return SamplingParams(max_tokens=max_tokens, ignore_eos=self.ignore_eos,
                                  structured_outputs=structure, **kwargs)
        except StructuredOutputError as exc:
            raise api_error(exc, fields) from None
        except ValueError as exc:
            raise bad_value(exc, PARAM_FIELDS) from None

    @property
    def include_usage(self) -> bool:
        """Whether a stream ends with a usage chunk."""
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_Common):
    """``POST /v1/chat/completions``. ``logprobs`` (bool) and ``top_logprobs`` (0-5)."""

    messages: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(default=None, ge=1, strict=True)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list | None = None

    def checked(self) -> tuple[list[dict], SamplingParams, int | None]:
        """``(messages as {"role", "content": text}, sampling params, top_logprobs)`` where
        ``top_logprobs`` is ``None`` without ``logprobs``.

        Raises:
            APIError: 400 naming the field (a message's role or content, tools, top_logprobs
                without logprobs, or a sampling value).
        """
        if self.tools:
            raise APIError(400, "tools are not supported by this engine", "tools", "unsupported")
        if self.top_logprobs is not None and self.top_logprobs > 0 and not self.logprobs:
            raise APIError(400, "top_logprobs needs logprobs set to true", "top_logprobs",
                           "invalid_value")
        messages = [_message(i, m) for i, m in enumerate(self.messages)]
        _check_user_text(messages)
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None \
            else self.max_tokens
        params = self.sampling_params(max_tokens)
        return messages, params, (self.top_logprobs or 0) if self.logprobs else None


COMPLETION_MAX_TOKENS = 16
"""``max_tokens`` of a ``/v1/completions`` request that sets none (or sets ``null``): OpenAI's
legacy completions and vLLM's default. Chat without a limit runs to the context window, as
OpenAI's chat does."""


class CompletionRequest(_Common):
    """``POST /v1/completions``: ``prompt`` is one string (or a list of one);
    ``logprobs`` is how many alternatives per token (0-5); ``max_tokens`` defaults to
    :data:`COMPLETION_MAX_TOKENS`."""

    prompt: str | list[str]
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    def checked(self) -> tuple[str, SamplingParams, int | None]:
        """``(prompt text, sampling params, top logprobs or None)``.

        Raises:
            APIError: 400 naming the field.
        """
        if self.echo:
            raise APIError(400, "echo is not supported by this engine", "echo", "unsupported")
        if self.suffix:
            raise APIError(400, "suffix is not supported by this engine", "suffix", "unsupported")
        if self.best_of is not None and self.best_of != self.n:
            raise APIError(400, "best_of must equal n (this engine returns every choice)",
                           "best_of", "unsupported")
        prompt = self.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise APIError(400, "prompt must be one string (a batch of prompts is not "
                               "supported; send one request each)", "prompt", "invalid_value")
            prompt = prompt[0]
        if not prompt:
            raise APIError(400, "prompt is empty", "prompt", "invalid_value")
        max_tokens = COMPLETION_MAX_TOKENS if self.max_tokens is None else self.max_tokens
        return prompt, self.sampling_params(max_tokens), self.logprobs


def _check_user_text(messages: list[dict]) -> None:
    """Refuse a chat with no user message that holds text, naming the content of its last user
    message (empty), or of its last message when it has no user message at all."""
    if any(m["role"] == "user" and m["content"].strip() for m in messages):
        return
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if users:
        i = users[-1]
        raise APIError(400, f"messages[{i}].content is empty: the chat needs a user message "
                       "with text", f"messages[{i}].content", "invalid_value")
    i = len(messages) - 1
    raise APIError(400, f"messages[{i}].content is not a user's: the chat has no user message "
                   "(add one with role user)", f"messages[{i}].content", "invalid_value")


def _message(i: int, m: dict) -> dict:
    """One chat message as ``{"role", "content": text}``; content may be a string or a list of
    ``{"type": "text", "text": ...}`` parts."""
    role, content = m.get("role"), m.get("content")
    if role not in ("system", "user", "assistant", "developer"):
        raise APIError(400, f"messages[{i}].role must be system, user, assistant or developer, "
                       f"got {str(role)[:40]!r}", f"messages[{i}].role", "invalid_value")
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise APIError(400, f"messages[{i}].content[{j}] must be a text part "
                               "({\"type\": \"text\", \"text\": ...}); this model reads text only",
                               f"messages[{i}].content", "invalid_value")
            texts.append(part["text"])
        content = "".join(texts)
    if content is None and role == "assistant":
        content = ""
    if not isinstance(content, str):
        raise APIError(400, f"messages[{i}].content must be a string or a list of text parts",
                       f"messages[{i}].content", "invalid_value")
    try:
        check_text(content, f"messages[{i}].content")
    except ValueError as exc:
        raise APIError(400, str(exc), f"messages[{i}].content", "invalid_value") from None
    return {"role": "system" if role == "developer" else role, "content": content}

