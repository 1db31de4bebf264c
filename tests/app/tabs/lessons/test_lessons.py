"""The Lessons tab: calculator figures equal the estimator's, the explorer reshapes exactly as the
sampler does, the handlers produce figures, and the tab builds inside a Blocks."""

import json
import pathlib

import gradio as gr
import pytest
import torch

from engine.experiments import calculator, explorer
from engine.worker.sampler import apply_filters
from engine.telemetry.estimator import estimate, known_models

MODELS = ["meta-llama/Llama-2-7b-hf", "Qwen/Qwen2.5-7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
          "google/gemma-2-2b", "openai-community/gpt2"]


def total(model, dtype, batch, seq):
    return estimate(model, dtype=dtype, batch=batch, seq_len=seq).total_bytes


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("dtype,batch,seq", [("fp16", 1, 2048), ("bf16", 8, 4096), ("fp32", 2, 512),
                                             ("int4", 32, 8192)])
def test_calculator_figures_equal_the_estimator(model, dtype, batch, seq):
    calc = calculator.calculate(model, seq, batch, dtype)
    est = estimate(model, dtype=dtype, batch=batch, seq_len=seq)
    for key in ("weights_bytes", "kv_bytes", "kv_bytes_per_token", "activation_bytes", "total_bytes"):
        assert calc[key] == getattr(est, key), key
    assert [g["name"] for g in calc["gpus"]] == [n for n, _ in calculator.GPUS]
    for g in calc["gpus"]:
        cap = g["memory_bytes"]
        assert g["fits"] == (est.total_bytes <= cap)
        b = g["max_batch"]
        if b:
            assert total(model, dtype, b, seq) <= cap < total(model, dtype, b + 1, seq)
        t = g["max_context"]
        if t and t < calc["max_positions"]:
            assert total(model, dtype, batch, t) <= cap < total(model, dtype, batch, t + 1)


def test_calculator_gpu_table_and_errors(tmp_path):
    names = [n for n, _ in calculator.GPUS]
    assert names == ["T4 16 GB", "L4 24 GB", "A10G 24 GB", "A100 40 GB", "A100 80 GB", "H100 80 GB",
                     "H200 141 GB"]
    huge = calculator.calculate("meta-llama/Llama-2-7b-hf", 4096, 1, "fp32")  # 27 GB of weights
    assert not huge["gpus"][0]["fits"] and huge["gpus"][0]["max_batch"] == 0
    with pytest.raises(LookupError):
        calculator.calculate("no/such-model-here", 128, 1, "fp16")
    with pytest.raises(ValueError):
        calculator.calculate(known_models()[0], 0, 1, "fp16")
    cfg = tmp_path / "config.json"
    cfg.write_text('{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, '
                   '"intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256}')
    small = calculator.calculate(str(cfg), 64, 1, "fp16")
    assert small["gpus"][0]["max_context"] == 256  # capped at the model's window


def test_calculator_view_and_table():
    from app.tabs.lessons.calculator import calculator_view

    fig, md = calculator_view(known_models()[0], "", None, 4096, 2, "fp16")
    calc = calculator.calculate(known_models()[0], 4096, 2, "fp16")
    assert [t.name.split(" ")[0] for t in fig.data] == ["weights", "KV", "activations"]
    assert fig.data[0].x[0] == pytest.approx(calc["weights_bytes"] / 16e9 * 100)
    assert "| T4 16 GB |" in md and "H200" in md and calc["kv_formula"] in md
    assert "beyond this model's window" not in md
    _, long = calculator_view("meta-llama/Llama-2-7b-hf", "", None, 8192, 1, "fp16")
    assert "beyond this model's window of 4,096 tokens" in long
    fig, md = calculator_view("x", "", None, 128, 1, "fp16")
    assert "⚠" in md and "pick a model" in md


CONFIG = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "intermediate_size": 128,
          "vocab_size": 100, "max_position_embeddings": 256, "_name_or_path": "my-tiny-model"}


def test_calculator_takes_a_pasted_or_uploaded_config(tmp_path):
    from app.tabs.lessons.calculator import calculator_view

    want = calculator.calculate(calculator.load_spec(_write(tmp_path, CONFIG)), 64, 1, "fp16")
    _, pasted = calculator_view(known_models()[0], json.dumps(CONFIG), None, 64, 1, "fp16")
    assert want["kv_formula"] in pasted
    upload = _write(tmp_path / "up", {**CONFIG, "num_hidden_layers": 4})
    want4 = calculator.calculate(calculator.load_spec(upload), 64, 1, "fp16")
    fig, uploaded = calculator_view(known_models()[0], json.dumps(CONFIG), upload, 64, 1, "fp16")
    assert "my-tiny-model" in fig.layout.title.text
    assert want4["kv_formula"] in uploaded and want["kv_formula"] not in uploaded  # the upload wins


@pytest.mark.parametrize("model,pasted,message", [
    ("/etc/passwd", "", "pick a model"),             # a server path is not a model of the table
    ("../../config.json", "", "pick a model"),
    ("someone/some-model", "", "pick a model"),      # nor a Hub id (no download from a client)
    ("x", "/etc/passwd", "not valid JSON"),          # pasted text is JSON, never a path
    ("x", "[1, 2]", "must be a JSON object"),
    ("x", "[" * 100_000, "nested too deeply"),
    ("x", "{" + " " * (1 << 20) + "}", "larger than 1024 KiB"),
    ("x", '{"hidden_size": 64}', "lacks num_hidden_layers, num_attention_heads"),
    ("x", "\ud800", "not valid Unicode"),
])
def test_calculator_refuses_paths_hub_ids_and_bad_configs(model, pasted, message):
    from app.tabs.lessons.calculator import calculator_view

    fig, md = calculator_view(model, pasted, None, 64, 1, "fp16")
    assert "⚠" in md and message in md, md
    assert not fig.data


def test_calculator_caps_an_upload_and_refuses_bad_sizes(tmp_path):
    from app.tabs.lessons.calculator import calculator_view

    big = tmp_path / "big.json"
    big.write_bytes(b"{" + b" " * (1 << 20) + b"}")
    _, md = calculator_view("x", "", str(big), 64, 1, "fp16")
    assert "larger than 1024 KiB" in md
    _, md = calculator_view(known_models()[0], "", None, 10**400, 1, "fp16")
    assert "sequence length must be a whole number" in md and len(md) < 300
    _, md = calculator_view(known_models()[0], "", None, 64, 0, "fp16")
    assert "batch must be" in md
    _, md = calculator_view(known_models()[0], "", None, 64, 1, "fp64")
    assert "dtype must be one of" in md


def _write(folder, config: dict) -> str:
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture(scope="module")
def answer(engine):
    from engine import SamplingParams

    out = engine.generate("Name a colour.", SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    return out.prompt_token_ids, out.token_ids


@pytest.mark.parametrize("t,k,p,m,r", [(1.0, 0, 1.0, 0.0, 1.0), (0.7, 0, 1.0, 0.0, 1.0),
                                       (1.3, 10, 1.0, 0.0, 1.0), (1.0, 0, 0.9, 0.0, 1.0),
                                       (0.8, 40, 0.95, 0.05, 1.0), (1.0, 0, 1.0, 0.1, 1.0),
                                       (1.0, 0, 1.0, 0.0, 1.5), (0.7, 20, 0.9, 0.0, 1.3),
                                       (1.0, 0, 1.0, 0.0, 0.8)])
def test_reshape_equals_the_sampler(loaded, engine, answer, t, k, p, m, r):
    """The explorer's numpy bars equal the sampler's own penalties and filters, token by token."""
    from engine import SamplingParams
    from engine.model.special_tokens import special_token_ids
    from engine.worker.model_runner import ModelRunner
    from engine.worker.sampler import apply_penalties

    prompt, out = answer
    sl = explorer.step_logits(engine, prompt, out, 2)
    logits = ModelRunner(loaded.model).recompute(prompt + out[:2]).float()
    exempt = torch.zeros(logits.shape[-1], dtype=torch.bool)
    exempt[sorted(set(loaded.eos_token_ids) | special_token_ids(loaded.tokenizer))] = True
    penalized = apply_penalties(logits, SamplingParams(repetition_penalty=r), torch.tensor(prompt + out[:2]),
                                torch.tensor(out[:2]), exempt)
    probs = apply_filters(penalized, t, k, p, m)
    got = explorer.view(sl, t, k, p, m, r)
    assert got["probs"] == pytest.approx(probs[torch.tensor(got["token_ids"])].tolist(), abs=1e-5)
    assert got["kept"] == int((probs > 0).sum())
    assert got["token_ids"][0] == int(torch.argmax(probs))  # the first bar is the sampler's most likely
    context = set(prompt + out[:2])
    assert got["seen"] == [i in context and not exempt[i] for i in got["token_ids"]]


@pytest.mark.fast
def test_temperature_zero_is_greedy_one_bar_at_one(loaded, engine, answer):
    from app.tabs.lessons.sampling import explorer_figure

    prompt, out = answer
    sl = explorer.step_logits(engine, prompt, out, 1)
    v = explorer.view(sl, 0.0, 5, 0.5, 0.0)
    assert v["greedy"] and v["kept"] == 1 and v["probs"][0] == 1.0 and sum(v["probs"]) == 1.0
    assert v["token_ids"][0] == out[1] and v["chosen_prob"] == 1.0  # greedy answer: argmax
    fig = explorer_figure(sl, 0.0, 0, 1.0, 0.0)
    assert list(fig.data[1].text).count("greedy") == 1 and fig.data[1].text[0] == "greedy"
    assert "greedy (temperature 0)" in fig.layout.title.text and "49,152" not in fig.layout.title.text


def test_repetition_penalty_rule_on_made_up_logits():
    logits = [4.0, 2.0, -1.0, -3.0]
    seen = [True, False, True, False]
    assert list(explorer.penalize(logits, seen, 2.0)) == [2.0, 2.0, -2.0, -3.0]  # ÷ if > 0, × if < 0
    assert list(explorer.penalize(logits, seen, 1.0)) == logits
    probs = explorer.reshape(logits, 0.0, repetition_penalty=4.0, seen=seen)
    assert list(probs) == [0.0, 1.0, 0.0, 0.0]  # greedy after the penalty takes the unseen token


def test_explorer_figure_hatches_the_tokens_the_penalty_touches():
    import numpy as np

    from app.tabs.lessons.sampling import explorer_figure

    logits = np.linspace(5.0, -5.0, 30)
    seen = np.zeros(30, dtype=bool)
    seen[[0, 3]] = True
    sl = explorer.StepLogits(step=1, token_ids=list(range(20)), texts=[f"t{i}" for i in range(20)],
                             logits=list(logits[:20]), chosen_id=1, chosen_text="t1", chosen_rank=1,
                             sorted_logits=logits, sorted_ids=np.arange(30), named_texts=[f"t{i}" for i in range(30)],
                             seen=seen)
    bars = explorer_figure(sl, 1.0, 0, 1.0, 0.0, 2.0).data[1]
    hatched = {t for t, shape in zip(bars.customdata, bars.marker.pattern.shape) if shape == "/"}
    assert hatched == {"t0", "t3"} and bars.customdata[0] == "t1"  # t0 fell behind t1 and t2
    assert set(explorer_figure(sl, 1.0, 0, 1.0, 0.0, 1.0).data[1].marker.pattern.shape) == {""}


def test_step_logits_of_a_greedy_answer(loaded, engine, answer):
    prompt, out = answer
    for step in range(len(out)):
        sl = explorer.step_logits(engine, prompt, out, step)
        assert sl.chosen_rank == 0 and sl.token_ids[0] == out[step] == sl.chosen_id  # greedy = argmax
        assert len(sl.token_ids) == len(sl.texts) == len(sl.logits) == 20
        assert sl.logits == sorted(sl.logits, reverse=True)
        assert sl.sorted_logits.shape == (loaded.spec.vocab_size,)
        assert [t for t, _ in sl.top()] == sl.texts
    with pytest.raises(ValueError):
        explorer.step_logits(engine, prompt, out, len(out))


def test_explorer_figure_marks_the_chosen_token(engine, answer):
    from app.tabs.lessons.sampling import explorer_figure, show_token

    prompt, out = answer
    sl = explorer.step_logits(engine, prompt, out, 1)
    fig = explorer_figure(sl, 1.0, 3, 1.0, 0.0)
    bars = fig.data[1]
    assert list(bars.marker.color).count("#C0392B") == 1 and bars.marker.color[0] == "#C0392B"
    assert sum(1 for y in bars.y if y > 0) == 3  # top-k 3 leaves three bars
    assert list(fig.layout.xaxis.ticktext) == [show_token(t) for t in sl.texts]
    assert show_token(" a\n") == "␣a↵" and show_token("") == "∅"
    assert explorer_figure(None, 1, 0, 1, 0).data == ()


def test_kv_live_streams_both_curves(engine):
    from app.tabs.lessons.kv_cache import kv_live

    frames = list(kv_live(engine, "Say hello.", 6, poll_s=0.05))
    fig, status = frames[-1]
    on, off = fig.data
    assert len(on.y) == len(off.y) == 5
    assert "Total time" in status and ("the same 6 tokens" in status or "part at output token" in status)
    assert len(frames) >= 2


def test_kv_lesson_names_the_token_where_the_two_runs_part(engine):
    """The status line is computed from the two real answers: "the same N tokens" only when the
    ids are equal, otherwise the first differing output token with each run's choice."""
    from engine import SamplingParams
    from engine.experiments.common import first_mismatch
    from app.tabs.lessons.kv_cache import _kv_final, divergence_note

    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    prompt = "Tell me a story about a robot who learns to paint."
    on = engine.submit(prompt, params, use_kv_cache=True, source="lesson")
    on.result(timeout=300)
    off = engine.submit(prompt, params, use_kv_cache=False, source="lesson")
    off.result(timeout=300)
    (_, status), = list(_kv_final(on, off, 32, engine.detokenize))
    a, b = on.output.token_ids, off.output.token_ids
    i = first_mismatch(a, b)
    if i is None:
        assert "the same 32 tokens" in status
    else:
        assert f"agree for {i} tokens and part at output token <b>{i + 1}</b>" in status
        assert engine.detokenize([a[i]]) in status or "&" in status
    assert divergence_note([1, 2, 3], [1, 2, 3]) == "both runs produced the same 3 tokens."
    note = divergence_note([1, 2, 3], [1, 5, 3], lambda ids: {2: "cat", 5: "dog"}[ids[0]])
    assert "part at output token <b>2</b>" in note and "“cat”" in note and "“dog”" in note


def test_kv_live_reports_a_bad_prompt(engine):
    from app.tabs.lessons.kv_cache import kv_live

    (fig, status), = list(kv_live(engine, "   ", 4))
    assert "⚠" in status


def test_sweep_and_share_handlers(engine):
    from app.tabs.lessons.prefill import run_share, run_sweep

    seen = []

    def progress(f, desc=""):
        seen.append((f, desc))

    fig, md, res = run_sweep(engine, 64, 2, progress)
    xs = [int(x) for x in fig.data[0].x]
    assert xs == pytest.approx([16, 32, 64], abs=3) and xs == res["prompt_tokens"]
    assert fig.layout.xaxis.type in (None, "linear", "-")  # numbers on a true scale, not categories
    assert "median of 2 runs" in fig.layout.title.text and "linear" in fig.layout.title.text
    per_token = list(fig.data[2].y)  # the right panel: time per prompt token, ms
    assert per_token == pytest.approx([s * 1000 / t for s, t in zip(res["prefill_s"], xs)])
    assert len(fig.data[1].x) == 6  # every single run is a dot
    assert "median of 2 runs" in md and "per prompt token" in md and seen
    fig, md = run_share(engine, 20)
    assert [t.name.split(":")[0] for t in fig.data] == ["prefill", "decode"] and "%" in md
    for words in ("memory-bound", "arithmetic intensity", "bandwidth", "Side by side: prefill"):
        assert words in md
    _, with_sweep = run_share(engine, 20, sweep=res)
    assert f"the sweep's {xs[-1]}-token prompt" in with_sweep


def test_build_lessons_inside_blocks(engine):
    from app.tabs.lessons import build_lessons

    with gr.Blocks() as demo:
        with gr.Tab("Lessons"):
            comps = build_lessons(engine)
    for key in ("kv_run", "kv_plot", "sweep_run", "share_run", "sweep_status", "share_status", "calc_plot",
                "calc_table", "calc_kv_dtype", "calc_overhead", "calc_samples", "ex_run", "ex_plot",
                "ex_step", "ex_temp", "ex_topk", "ex_topp", "ex_minp", "ex_rep", "ex_answer", "cd_run",
                "cd_plot", "cd_example", "roof_model", "roof_json", "roof_answer", "roof_prefill_plot",
                "rem_questions", "rem_run", "rem_table", "rem_sampling"):
        assert key in comps
    assert "H200" in comps["calc_table"].value
    assert demo.fns  # events are wired


def test_explorer_generate_and_choices(engine):
    import html as html_lib

    from app.tabs.lessons.sampling import answer_html, explorer_generate, step_choices

    ans = explorer_generate(engine, "Name a colour.", 0.8, 0, 1.0, 0.0, 3)
    assert len(ans["token_ids"]) == len(ans["texts"]) >= 1
    html = answer_html(ans)
    assert html_lib.escape(ans["text"]) in html and f"{len(ans['token_ids'])} tokens" in html
    again = explorer_generate(engine, "Name a colour.", 0.8, 0, 1.0, 0.0, 3)
    assert again["token_ids"] == ans["token_ids"]  # same seed, same answer
    choices = step_choices(ans)
    assert [v for _, v in choices] == list(range(len(ans["texts"])))
    assert choices[0][0].startswith("0: ")


def test_kv_figure_before_any_run_has_real_axes_and_a_hint():
    from app.tabs.lessons.kv_cache import kv_live_figure

    fig = kv_live_figure([], [], 32)
    assert list(fig.layout.xaxis.range) == [0, 33] and list(fig.layout.yaxis.range) == [0, 100]
    assert "Run" in fig.layout.annotations[0].text
    assert not kv_live_figure([12.0], [30.0], 32).layout.annotations  # data: no hint


def test_quantization_lesson_figure_and_table():
    """The lesson's view of a quantization result (made-up numbers, no model run)."""
    from app.tabs.lessons import quantization as lessons

    def r(label, w, kv, top1, mb, dec):
        return {"label": label, "weights": w, "kv_cache_dtype": kv, "perplexity": 15.6,
                "top1_agreement": top1, "kl_mean": 0.003, "weights_bytes": int(mb * 1e6),
                "kv_bytes_per_token": 11_520 if kv == "fp8" else 46_080, "decode_tokens_per_s": dec,
                "decode_tokens_per_s_vs_fp32": dec / 20, "prefill_tokens_per_s": 700.0,
                "batch_tokens_per_s": 150.0}
    res = {"rows": [r("fp32 weights", "fp32", "auto", 1.0, 538.1, 20.0),
                    r("int4 weights, fp8 KV", "int4", "fp8", 0.93, 94.8, 70.0)],
           "params": {"text_tokens_actual": 128, "prefill_tokens_actual": 64, "batch": 4,
                      "batch_tokens": 4}}
    fig = lessons.quant_figure(res)
    assert len(fig.data) == 3 and list(fig.data[0].x) == ["fp32", "int4, fp8 KV"]
    table = lessons.quant_table(res)
    assert "| int4 weights, fp8 KV | 15.60 | 93.0% |" in table and "11,520 B" in table
    assert "3.50×" in table and "128 tokens" in table
