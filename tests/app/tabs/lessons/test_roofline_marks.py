"""The roofline plots' marks can be told apart and sit on their axes, and the dtype boxes are
not silently ignored for the page's own model."""

from engine.experiments import intensity

from app.tabs.lessons import roofline as lesson

ENGINE = intensity.DecodeShape(params=134_515_008, weight_bytes=94_835_584, kv_bytes_per_token=23_040,
                               layers=30, heads=9, head_dim=64)
MACHINE = {"device": "cpu", "dtype": "bfloat16", "bandwidth_gb_per_s": 16.0, "flops_per_s": 40e9,
           "ridge": 2.5}


def test_each_gpus_ridge_line_has_its_own_dash():
    for fig in (lesson.roofline_figure(ENGINE, 512, MACHINE), lesson.prefill_figure(ENGINE, MACHINE)):
        gpus = [t for t in fig.data if (t.name or "").startswith("ridge of") and "datasheet" in t.name]
        assert len(gpus) == 5
        assert len({t.line.dash for t in gpus}) == 5, [t.line.dash for t in gpus]


def test_a_prefill_crossing_below_the_shortest_prompt_is_marked_on_the_axis():
    """This machine's ridge of 2.5 FLOPs per byte is passed from a 1-token prompt; the axis starts
    at 16 tokens, so the marker sits there and says so."""
    fig = lesson.prefill_figure(ENGINE, MACHINE)
    marks = [t for t in fig.data if t.mode == "markers"]
    assert marks and min(m.x[0] for m in marks) >= lesson.PROMPTS[0]
    mine = [m for m in marks if "this machine" in m.hovertemplate]
    assert mine and "already at the shortest shown" in mine[0].hovertemplate


def test_the_page_model_says_the_dtype_boxes_do_not_apply_to_it():
    name = "smollm2-135m"
    *_, status = lesson.roofline_view(ENGINE, name, lesson.ENGINE_MODEL, "fp16", "fp16", "", 512, None,
                                      "int4 weights, bfloat16 KV cache")
    assert "<b>int4 weights, bfloat16 KV cache</b>" in status and "(fp16 weights, fp16 KV cache)" in status
    assert "apply to a listed model" in status
    *_, listed = lesson.roofline_view(ENGINE, name, "meta-llama/Llama-2-7b-hf", "fp16", "fp16", "", 512,
                                      None, "int4 weights, bfloat16 KV cache")
    assert listed == ""
