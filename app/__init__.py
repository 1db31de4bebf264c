"""The playground's web page (Gradio + Plotly). It talks to an engine only through
:class:`engine.protocol.EngineClient` and never imports torch.

- :mod:`app.page`: the Blocks, the sidebar and the tabs, each built by its own ``build(ctx)``.
- :mod:`app.tabs`: one package per tab: ``playground`` (layout, events, handlers, the frame
  schema), ``beams`` (beams and samples), ``lessons`` (one module per lesson, one registry).
- :mod:`app.render`: pure builders of Plotly figures, cards and HTML (no Gradio).
- :mod:`app.state`: the shared ``Playground`` (sessions, Stop, traces), one request's
  ``RunState``, the views drawn once for every page, the device monitor.
- :mod:`app.server`: ``python -m app`` (flags, launch), the Gradio API endpoints, the ``/v1``
  mount, error ids, field checks, assets, and the middleware that caps bodies
  (``limits``), answers ``/stop`` over REST (``rest_calls``) and serves static files without a
  temporary path (``file_routes``).
- :mod:`app.remote`: the page in front of a remote OpenAI-compatible server.
- :mod:`app.bench`: the page benchmark (``python -m app.bench.pages``), not part of the page.
"""
