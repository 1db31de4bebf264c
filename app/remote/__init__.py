"""The page in front of a remote OpenAI-compatible server (``python -m app --backend openai``).

:class:`RemoteEngine` offers the page what ``LLMEngine`` offers it (``submit`` returning a
handle that streams ``StepEvent`` objects, ``stats()``, ``info``), built from the server's
stream and its Prometheus ``/metrics``. Nothing here imports torch.

- :mod:`.stream`: one streamed request over HTTP, as step events timed on this client.
- :mod:`.metrics`: the poller of the server's ``/metrics`` (vLLM's names, ours, SGLang's).
- :mod:`.engine`: :class:`RemoteEngine`, its handle and its model info.
- :mod:`.view`: the badge, the KV line and the panels that have no data from a remote engine.
"""

from .engine import RemoteEngine

__all__ = ["RemoteEngine"]
