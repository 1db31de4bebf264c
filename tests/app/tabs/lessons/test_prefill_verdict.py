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
