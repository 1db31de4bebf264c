"""The page's state on the server.

- :mod:`.playground`: ``Playground``, shared by every session: requests per session, Stop,
  traces, the engine's stats as clients may see them.
- :mod:`.run_state`: ``RunState``, one request's step events folded into plain lists.
- :mod:`.shared_views`: what every open page draws alike, drawn once per refresh.
- :mod:`.device_monitor`: the background device sampler.
"""
