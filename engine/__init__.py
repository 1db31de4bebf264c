"""An LLM inference engine with explicit prefill and decode steps, a KV cache and a sampler.

The engine knows nothing of any web page: it streams plain :class:`StepEvent` dataclasses.
"""

from engine.config import EngineConfig
from engine.core.finish_reason import FinishReason
from engine.errors import EngineShutdownError, ModelLoadError, NonFiniteLogitsError, QueueFullError
from engine.output.events import Candidate, RequestOutput, StepEvent
from engine.output.metrics import RequestMetrics
from engine.params import SamplingParams

__all__ = ["LLMEngine", "EngineConfig", "SamplingParams", "StepEvent", "RequestOutput",
           "RequestMetrics", "Candidate", "FinishReason", "QueueFullError", "EngineShutdownError",
           "ModelLoadError", "NonFiniteLogitsError", "RequestHandle", "load_model",
           "DEFAULT_MODEL"]


def __getattr__(name):  # torch-heavy parts load on first use, so `engine.params` stays light
    if name == "LLMEngine":
        from engine.engine import LLMEngine
        return LLMEngine
    if name == "RequestHandle":
        from engine.output.handle import RequestHandle
        return RequestHandle
    if name in ("load_model", "DEFAULT_MODEL"):
        from engine.model import loader
        return getattr(loader, name)
    raise AttributeError(name)
