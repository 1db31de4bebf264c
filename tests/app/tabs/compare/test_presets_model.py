"""Each Compare preset on the embedded model (the shared fp32 engine), asserting what it shows."""

import json

import pytest

from app.state.playground import Playground
from app.tabs.compare import handlers
from app.tabs.compare.engines import EngineSet
from app.tabs.compare.presets import BY_KEY, LONG_PROMPT

PROMPT = "Name three colours and say why you like them."
MEDIUM_PROMPT = LONG_PROMPT[:700]  # about 150 tokens with the chat template: above the 128-token piece


@pytest.fixture(scope="module")
def setup(engine, tmp_path_factory):
    pg = Playground(engine, trace_dir=tmp_path_factory.mktemp("traces"), monitor=False)
    engines = EngineSet(engine)
    yield pg, engines
    engines.shutdown()
    pg.close()


def run(setup, left, right, max_tokens=16, prompt=PROMPT):
    pg, engines = setup
    notes = []
    frames = list(handlers.compare(pg, engines, "test", prompt, left, right, max_tokens,
                                   notify=notes.append))
    assert not notes, notes
    return frames, frames[-1]["result"]


@pytest.mark.fast
def test_greedy_against_greedy_gives_equal_tokens_in_shared_batches(setup):
    frames, res = run(setup, {"temperature": 0}, {"temperature": 0})
    left, right = res["left"], res["right"]
    assert left["token_ids"] == right["token_ids"] and left["first_diff"] is None
    assert left["batch_size"] == right["batch_size"] == 2
    assert left["engine"] == right["engine"] and left["engine"].startswith("served engine")
    # the two streams overlap: each side's first token comes before the other's last
    assert left["token_times_s"][0] < right["token_times_s"][-1]
    assert right["token_times_s"][0] < left["token_times_s"][-1]
    assert len(frames) > 3  # streamed, not one frame at the end


def test_a_side_equals_the_same_request_alone(setup, engine):
    _, res = run(setup, {"temperature": 0}, {"temperature": 0.7, "seed": 5}, max_tokens=12)
    from engine import SamplingParams

    for side, params in (("left", SamplingParams(temperature=0, max_tokens=12)),
                         ("right", SamplingParams(temperature=0.7, seed=5, max_tokens=12))):
        alone = engine.generate(PROMPT, params, cache_salt=f"alone-{side}")
        assert res[side]["token_ids"] == alone.token_ids, side
        assert res[side]["kv_cache_bytes"] == alone.kv_cache_bytes, side


def test_greedy_against_sampling_parts_and_marks_the_chip(setup):
    p = BY_KEY["greedy_sampling"]
    frames, res = run(setup, p.left, p.right)
    diff = res["left"]["first_diff"]
    assert diff is not None and diff == res["right"]["first_diff"]
    last = frames[-1]
    assert last["left"].count("tok-diff") == 1 and last["right"].count("tok-diff") == 1
    assert last["diff"] == str(diff)


@pytest.mark.slow
def test_kv_cache_off_has_the_higher_tpot(setup):
    p = BY_KEY["kv_on_off"]
    # 10 tokens after a 150-token prompt: the sequence is past 128 tokens from the start, as the
    # preset's 128-token answers are after their first ~70 tokens
    _, res = run(setup, {**p.left, "max_tokens": 10}, {**p.right, "max_tokens": 10}, prompt=MEDIUM_PROMPT)
    on, off = res["left"], res["right"]
    # the no-cache side recomputes every token in 128-token pieces, two or more steps per token
    assert off["tpot_s"] > 1.3 * on["tpot_s"], (on["tpot_s"], off["tpot_s"])
    print(f"KV on/off TPOT {on['tpot_s'] * 1000:.0f} / {off['tpot_s'] * 1000:.0f} ms")
    assert off["kv_cache_bytes"] == 0 < on["kv_cache_bytes"]


@pytest.mark.slow
def test_speculative_side_accepts_drafts_and_needs_fewer_steps(setup):
    p = BY_KEY["spec_on_off"]
    _, res = run(setup, {**p.left, "max_tokens": 24}, {**p.right, "max_tokens": 24}, prompt=p.prompt)
    spec, plain = res["left"], res["right"]
    assert spec["acceptance"] is not None and spec["acceptance"] > 0.3
    assert plain["acceptance"] is None
    assert spec["tpot_s"] < plain["tpot_s"]
    print(f"spec on/off TPOT {spec['tpot_s'] * 1000:.0f} / {plain['tpot_s'] * 1000:.0f} ms, "
          f"acceptance {spec['acceptance']:.2f}")


@pytest.mark.slow
def test_warm_prefix_cache_has_the_lower_ttft(setup):
    p = BY_KEY["prefix_cold_warm"]
    _, res = run(setup, p.left, p.right, prompt=p.prompt, max_tokens=4)
    cold, warm = res["left"], res["right"]
    assert cold["cached_prompt_tokens"] == 0 and warm["cached_prompt_tokens"] >= 256
    assert warm["ttft_s"] < cold["ttft_s"], (warm["ttft_s"], cold["ttft_s"])
    print(f"prefix cold/warm TTFT {cold['ttft_s'] * 1000:.0f} / {warm['ttft_s'] * 1000:.0f} ms, "
          f"{warm['cached_prompt_tokens']} cached")


@pytest.mark.slow
def test_schema_side_parses_as_json(setup):
    p = BY_KEY["free_json"]
    _, res = run(setup, p.left, p.right, prompt=p.prompt, max_tokens=64)
    assert res["right"]["finish_reason"] == "stop"
    person = json.loads(res["right"]["text"])
    assert isinstance(person["name"], str) and isinstance(person["age"], int)


@pytest.mark.slow
def test_int4_weights_are_under_0_4_of_bf16(setup):
    p = BY_KEY["int4_bf16"]
    _, res = run(setup, p.left, p.right, max_tokens=4)
    int4, bf16 = res["left"], res["right"]
    assert int4["engine"].startswith("second engine (int4") and bf16["engine"].startswith("second engine (bf16")
    assert int4["weight_bytes"] < 0.4 * bf16["weight_bytes"], (int4["weight_bytes"], bf16["weight_bytes"])
    print(f"weights int4/bf16 {int4['weight_bytes']:,} / {bf16['weight_bytes']:,} B")


@pytest.mark.slow
def test_fp8_kv_cache_bytes_are_half_of_bf16(setup):
    p = BY_KEY["kv_bf16_fp8"]
    _, res = run(setup, p.left, p.right, max_tokens=8)
    bf16, fp8 = res["left"], res["right"]
    per_token = [s["kv_cache_bytes"] / s["kv_cache_tokens"] for s in (bf16, fp8)]
    assert per_token[1] == 0.5 * per_token[0]
    print(f"KV bytes per token bf16/fp8 {per_token[0]:,.0f} / {per_token[1]:,.0f} B")
    if bf16["tokens"] == fp8["tokens"]:
        assert fp8["kv_cache_bytes"] == bf16["kv_cache_bytes"] // 2


@pytest.mark.slow
def test_frames_carry_what_changed_and_do_not_grow(setup, monkeypatch):
    from app.tabs.compare.events import live_updates

    # a frame for every new token: on a fast machine 48 tokens took four 0.1 s frames, too few
    # to compare early frames with late ones
    monkeypatch.setattr(handlers, "TEXT_EVERY_S", 0.0)
    monkeypatch.setattr(handlers, "POLL_S", 0.002)
    pg, engines = setup
    frames = handlers.compare(pg, engines, "test", "Count from one to fifty in words.",
                              {"temperature": 0}, {"temperature": 0}, 48)
    values = list(live_updates(frames, "cmp-frames-1"))
    # each value is the log so far; its last line is that frame's (the log starts a new part
    # when it grows long, so the last value alone holds only the latest frames)
    lines = [v.rstrip("\n").rsplit("\n", 1)[-1] for before, v in zip(values, values[1:-1]) if v != before]
    lines = [x for x in lines if x.startswith("{") and "_tpl" not in x]
    sizes = [len(x.encode()) for x in lines]
    assert len(sizes) >= 6, sizes
    quarter = max(2, len(sizes) // 4)
    early, late = sorted(sizes[1:1 + quarter]), sorted(sizes[-quarter - 1:-1])
    assert late[len(late) // 2] <= 1.5 * early[len(early) // 2], sizes  # chips appended, points extended
    assert max(sizes[1:]) < 12_000, sizes
    print(f"compare frames: {len(sizes)}, median {sorted(sizes)[len(sizes) // 2]} B, total {sum(sizes)} B")
