"""The Prefill and decode lesson calls a prompt's prefill compute-bound on this CPU and names the
prompt length from which it is on a GPU, the same length the Memory-bound lesson prints."""

import re

from app.tabs.lessons import prefill, roofline
from tests.support.fakes import FakeEngine


def test_compute_bound_is_said_of_this_cpu_and_the_gpus_length_matches_the_roofline_lesson():
    engine = FakeEngine()
    gpu, tokens = prefill.gpu_prefill_from(engine)
    text = prefill.memory_bound_html(engine.info, 900.0, 30.0, 73, "this request's 73-token prompt",
                                     (gpu, tokens))
    assert "<b>on this CPU</b>" in text and "(compute-bound here)" in text
    # the other lesson's answer for the same model: "a prefill from **N prompt tokens**"
    answer = roofline.crossing_text(roofline.model_shape(engine), 512, "this model")
    theirs = int(re.search(r"a prefill from \*\*([\d,]+) prompt tokens", answer).group(1).replace(",", ""))
    assert gpu == roofline.REFERENCE_GPU and tokens == theirs
    assert f"on an {gpu} this model's prefill turns compute-bound only from {tokens:,} tokens" in text


def test_the_decode_intensity_is_the_memory_bound_lessons_figure():
    """The student read 2.8 FLOPs per byte here and 2.9 in the Memory-bound lesson for the same
    batch-1 decode step: this lesson divided by every weight byte, that one by the bytes a step
    reads (without the table kept only for the embedding lookup). Both now print one figure."""
    import re
    from types import SimpleNamespace

    from engine.experiments.intensity import DecodeShape
    from app.tabs.lessons import prefill

    info = SimpleNamespace(num_params=134_515_008, weights_bytes=101_000_000, weights_read_bytes=94_835_584)
    text = prefill.memory_bound_html(info, 600.0, 60.0, 73, "measured")
    shown = re.search(r"arithmetic intensity</b> of ([\d.]+) FLOP per byte", text).group(1)
    shape = DecodeShape(params=info.num_params, weight_bytes=info.weights_read_bytes, kv_bytes_per_token=0,
                        layers=0, heads=0, head_dim=0)
    assert shown == f"{shape.intensity(1, 0):.1f}" == "2.8"
    from app.render.fmt import fmt_bytes

    assert f"every step reads all {fmt_bytes(info.weights_read_bytes)} of weights" in text
