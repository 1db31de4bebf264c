"""How the page is served.

- :mod:`.main`: ``python -m app``: flags, model load, serve until interrupted.
- :mod:`.launch`: the launch settings (no error text or server file reaches a client, uploads
  capped, REST calls get defaults, a private temp folder).
- :mod:`.gradio_api`: the ``/generate``, ``/stats`` and ``/stop`` endpoints.
- :mod:`.openai_mount`: the OpenAI-compatible ``/v1`` routes on the page's port.
- :mod:`.errors`: unexpected exceptions become an error id; :mod:`.fields`: type checks of
  every value a client sends; :mod:`.assets`: CSS and example prompts.
"""
