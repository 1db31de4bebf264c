"""The sidebar's decode-step line says which path runs, from the engine's compile status."""

from app.render.cards import decode_step_html
from engine.protocol import CompileStatus


def status(**kw):
    return CompileStatus(**{"buckets": (1, 2, 4, 8, 16, 32), **kw})


def test_each_state_of_the_compiled_step_reads_as_a_person_would_say_it():
    assert "<b>eager</b> (transformers' model code)" in decode_step_html(status())
    busy = decode_step_html(status(status="compiling", ready=[1, 2], compiling_s=61.4))
    assert ("<b>compiled</b> for batches up to 2, <b>eager</b> above meanwhile (compiling 3 of 6 "
            "batch buckets in the background, 61 s so far)") in busy
    shared = decode_step_html(status(status="compiling", ready=[2, 4, 8, 16, 32], compiling_s=50.0))
    assert ("<b>compiled</b> for batches up to 32; batch 1 runs padded to 2 rows until its own graph "
            "is ready (compiling 6 of 6") in shared
    first = decode_step_html(status(status="compiling", compiling_s=12.0))
    assert "<b>eager</b> meanwhile" in first and "compiling 1 of 6 batch buckets" in first
    done = decode_step_html(status(path="compiled", status="ready", ready=[1, 2, 4, 8, 16, 32],
                                   compile_s=63.6, cache_hits=6))
    assert "<b>compiled</b>" in done and "64 s to compile from the on-disk cache" in done
    assert "prompts" not in done
    rows = decode_step_html(status(path="compiled", status="ready", ready=[1, 2, 4, 8, 16, 32],
                                   compile_s=63.6, prompts="rows"))
    assert rows.endswith("to compile); prompts run in the same graph, a row per token</div>")
    failed = decode_step_html(status(status="failed", error="RuntimeError: <no compiler>"))
    assert "compiling failed: RuntimeError: &lt;no compiler&gt;" in failed
    assert decode_step_html(status(path="remote")) == ""
