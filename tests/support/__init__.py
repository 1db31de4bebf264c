"""What the tests share, each written once (no tests here).

- :mod:`.paths`: the repository root.
- :mod:`.fakes`: a fake :class:`engine.protocol.EngineClient` and hand-made events and outputs.
- :mod:`.runners`: a scripted model runner for driving ``LLMEngine`` without a model.
- :mod:`.servers`: a free port, polling, the page served on loopback, ``python -m engine
  serve`` in a child process, an app in a thread, parsed ``/metrics``.
- :mod:`.browser`: Debian's Chromium, its flags, the skip-or-fail rule, page probes.
- :mod:`.cli`: ``python -m engine ...`` as a user runs it.
- :mod:`.prompts`: the parity prompts; :mod:`.load_plan` and :mod:`.load_clients`: the API
  load test's requests and its client process.
"""
