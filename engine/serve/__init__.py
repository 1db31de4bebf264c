"""An OpenAI-compatible HTTP API in front of an :class:`engine.LLMEngine` (FastAPI, no Gradio).

- :mod:`engine.serve.app`: the app factories (``create_api`` for the ``/v1`` routes,
  ``create_server`` adding ``/health`` and ``/metrics`` for ``python -m engine serve``).
- :mod:`engine.serve.protocol`: request bodies and their translation to ``SamplingParams``.
- :mod:`engine.serve.responses`: response and stream-chunk bodies built from engine outputs.
- :mod:`engine.serve.requests`: submitting a request's ``n`` choices and following them.
- :mod:`engine.serve.streaming`: server-sent events that abort their requests on disconnect.
- :mod:`engine.serve.errors`: OpenAI's error shape and status codes.
- :mod:`engine.serve.auth`: the API key rules.
- :mod:`engine.serve.metrics`: the Prometheus exporter.
"""
