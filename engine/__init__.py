"""An LLM inference engine with explicit prefill and decode steps, a KV cache and a sampler.

The engine knows nothing of any web page: it streams plain :class:`StepEvent` dataclasses.
"""

from .events import Candidate, RequestOutput, StepEvent
from .metrics import RequestMetrics
from .params import SamplingParams

__all__ = ["LLMEngine", "SamplingParams", "StepEvent", "RequestOutput", "RequestMetrics",
           "Candidate", "QueueFullError", "RequestHandle", "load_model", "ModelLoadError",
           "DEFAULT_MODEL"]


def __getattr__(name):  # torch-heavy parts load on first use, so `engine.params` stays light
    if name == "LLMEngine":
        from .engine import LLMEngine
        return LLMEngine
    if name == "QueueFullError":
        from .scheduler import QueueFullError
        return QueueFullError
    if name == "RequestHandle":
        from .handle import RequestHandle
        return RequestHandle
    if name in ("load_model", "ModelLoadError", "DEFAULT_MODEL"):
        from . import loader
        return getattr(loader, name)
    raise AttributeError(name)
