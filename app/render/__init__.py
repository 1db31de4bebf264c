"""Pure builders of what the page shows: Plotly figures (plain dicts, :mod:`.plainfig`), cards
and HTML. No Gradio, no torch: functions of plain data, tested without a browser.

- :mod:`.figures`: latency, KV cache, memory and device panels; :mod:`.spec`: the speculative
  steps' trace.
- :mod:`.cards`: stat cards, status line, model badge, KV formula, rolling table.
- :mod:`.tokens`: the token inspector's chips; :mod:`.batch`: the batching section (block
  pool, block tables, recent steps); :mod:`.beams`: beams and samples.
- :mod:`.fmt`: number formats (decimal units).
"""
