"""The long-lived heap is frozen once an engine is built (full collections skip it); when the
engine shuts down its cycles are freed and what still lives is frozen again."""

import gc
import weakref

from engine import LLMEngine
from tests.support.runners import ScriptedRunner


class _Cycle:
    """An object in a reference cycle: only the cyclic collector can free it."""

    def __init__(self):
        self.me = self


def test_an_engine_freezes_the_heap_and_frees_its_cycles_on_shutdown(loaded):
    gc.unfreeze()
    cycle = _Cycle()
    gone = weakref.ref(cycle)
    eng = LLMEngine(loaded, runner=ScriptedRunner([1, 2]), telemetry=False)
    eng.generate("hi")                       # the engine thread has frozen the heap by now
    assert gc.get_freeze_count() > 100_000   # the model, tokenizer, torch, transformers...
    del cycle
    gc.collect()
    assert gone() is not None                # frozen: a collection does not look at it
    eng.shutdown()
    assert gone() is None                    # thawed and collected at shutdown
    assert gc.get_freeze_count() > 100_000   # what still lives is frozen again
