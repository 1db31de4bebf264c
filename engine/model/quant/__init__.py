"""Quantized weights: int4/int8 linear layers on PyTorch's kernels, the embedded GGUF's 4-bit blocks, the ``weights`` option."""
