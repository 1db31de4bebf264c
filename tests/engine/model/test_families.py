"""The one list of model families per path: the checks use it and the messages name exactly it."""

import re
from types import SimpleNamespace

from engine import wiring
from engine.model import families
from engine.model.families import (COMPILED_FAMILIES, PAGED_FAMILIES, compiled_unsupported_reason,
                                   family_list, kv_dtype_needs_paged, paged_unsupported_note)
from engine.worker.compiled import llama_decode


def _named(message: str) -> list[str]:
    """The family names a message lists (the words after "supports"/"covers"/"a", up to the list's end)."""
    listed = re.search(r"(?:supports|covers|batching on a) ([a-z0-9]+(?:, [a-z0-9]+)*(?: and [a-z0-9]+)?)",
                       message)
    assert listed, message
    return re.split(r", | and ", listed.group(1))


def test_family_list_reads_as_a_sentence():
    assert family_list(("a",)) == "a"
    assert family_list(("a", "b")) == "a and b"
    assert family_list(("a", "b", "c")) == "a, b and c"


def test_messages_name_exactly_the_lists():
    assert _named(paged_unsupported_note("gpt2")) == list(PAGED_FAMILIES)
    assert _named(kv_dtype_needs_paged("fp8")) == list(PAGED_FAMILIES)
    assert _named(compiled_unsupported_reason("gpt2")) == list(COMPILED_FAMILIES)
    assert paged_unsupported_note("gpt2").startswith("gpt2 architecture")
    assert compiled_unsupported_reason("").endswith("not this model")


def test_the_paths_check_the_one_list():
    assert wiring.PAGED_FAMILIES is families.PAGED_FAMILIES
    assert llama_decode.FAMILIES is families.COMPILED_FAMILIES
    assert set(COMPILED_FAMILIES) <= set(PAGED_FAMILIES)  # the compiled step runs on the paged pool
    for kind in ("gpt2", "qwen3"):
        model = SimpleNamespace(config=SimpleNamespace(model_type=kind))
        assert llama_decode.unsupported_reason(model) == compiled_unsupported_reason(kind)
