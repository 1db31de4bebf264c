"""Small C kernels of the engine's own, built on first use with the machine's C compiler.

- ``paged_decode.c`` / :mod:`.decode_attention`: paged decode attention on the CPU, read
  straight from the KV pool through block tables, batch-invariant by construction.
- ``row_summary.cpp`` / :mod:`.row_summary`: the sampler's per-row results (token, probability,
  candidates, finite flag) in one pass, selected from its inputs.
"""
