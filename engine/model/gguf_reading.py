"""Reading a GGUF file's header quickly: ``gguf.GGUFReader`` over a plain array.

``gguf.GGUFReader`` maps the file as a ``numpy.memmap`` and slices it once per part of every
metadata field: the embedded model's tokenizer alone is about 100,000 strings, and every slice of
a ``memmap`` runs numpy's Python-level ``__array_finalize__``. Reading the header took 2.3-2.6 s
on a 2-core AMD EPYC; over a plain ``ndarray`` view of the same mapping (no copy) it takes
0.7 s, with the same fields and tensors. A first start reads the file three times (the config,
the tokenizer, the weights): about 6 s of CPU less (its wall clock is bound by the engine's
kernels, built meanwhile: docs/performance.md, "Time to full speed")."""

from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np

_lock = threading.Lock()


@functools.cache
def plain_reader_class():
    """``gguf.GGUFReader``'s subclass whose ``data`` is a plain ``ndarray`` view of the mapping
    (read-only, the same bytes; the mapping stays open through the view's base)."""
    from gguf import GGUFReader

    class PlainGGUFReader(GGUFReader):
        @property
        def data(self) -> np.ndarray:
            return self._plain

        @data.setter
        def data(self, value: np.ndarray) -> None:
            self._plain = value.view(np.ndarray)

    return PlainGGUFReader


def read_gguf(path: str):
    """The ``GGUFReader`` of ``path`` (fields and tensors as the library gives them).

    Raises:
        ValueError: not a GGUF file, or a version the library does not read.
    """
    return plain_reader_class()(path)


@contextlib.contextmanager
def plain_gguf_reads():
    """While inside, ``transformers``' own GGUF loading (``AutoConfig`` / ``AutoTokenizer``
    with ``gguf_file``, which import ``gguf.GGUFReader`` when called) reads through
    :func:`plain_reader_class`. One at a time (a lock); the library's class is put back on exit."""
    import gguf

    with _lock:
        original = gguf.GGUFReader
        gguf.GGUFReader = plain_reader_class()
        try:
            yield
        finally:
            gguf.GGUFReader = original
