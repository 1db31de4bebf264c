"""The compiled decode step: a compact Llama-family decode forward over static batch buckets.

- :mod:`.attention_op`: paged decode attention as one ``torch.library`` custom op, so tracing
  never breaks on it (its body runs eagerly: the C kernel of
  :mod:`engine.worker.kernels`, batch-invariant).
- :mod:`.llama_decode`: the decode forward of the Llama family (Llama, Mistral without a
  sliding window, Qwen2) on the loaded model's own modules and weights, checked against
  transformers' model code, which stays the reference and the path for everything else.
- :mod:`.compiled_backend`: decode rows of up to 32 sequences padded to a batch bucket
  (1, 2, 4, 8, 16, 32) and run through ``torch.compile`` (inductor), compiled in the
  background while the eager path serves.
"""
