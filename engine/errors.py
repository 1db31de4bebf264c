"""The engine's error types (no torch needed, so callers can catch them cheaply)."""


class QueueFullError(RuntimeError):
    """The waiting queue is at its maximum size; try again later."""


class ModelLoadError(RuntimeError):
    """The model could not be loaded; the message names the model and says why."""


class NonFiniteLogitsError(RuntimeError):
    """The model produced NaN or inf logits; the request ends with finish reason ``error``."""


class EngineShutdownError(RuntimeError):
    """The engine has been shut down and takes no more requests."""
