"""The playground's web page (Gradio + Plotly). It talks to ``engine`` only through its API and
never imports torch.

- :mod:`app.cli`: ``python -m app`` flags and launch.
- :mod:`app.ui`: the Blocks layout; :mod:`app.wiring`: its event listeners and API endpoints.
- :mod:`app.handlers`: what Generate, Stop and the timers do, as plain generators of frames.
- :mod:`app.service`: ``Playground``, the shared view of the engine (sessions, Stop, traces).
- :mod:`app.session`: ``RunState``, one request's events folded into plain lists.
- :mod:`app.figures`, :mod:`app.cards`, :mod:`app.tokens_view`: Plotly figures and HTML pieces.
- :mod:`app.monitor`: the background device sampler; :mod:`app.api`: the ``/generate`` endpoint.
- :mod:`app.server`: the launch settings (no error text or server file reaches a client, REST
  calls get defaults) and the middleware of :mod:`app.limits` (bodies and texts capped),
  :mod:`app.rest_calls` (``/stop`` over REST) and :mod:`app.file_routes` (uploads off, the static
  route); :mod:`app.errors`: unexpected exceptions become an error id;
  :mod:`app.fields`: type checks of every value a client sends.
"""
