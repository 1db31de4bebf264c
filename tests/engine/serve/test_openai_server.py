"""The OpenAI-compatible API of ``python -m engine serve``, driven by the ``openai`` package over
real HTTP on 127.0.0.1, on the embedded model in fp32 (the same weights as the ``engine``
fixture, whose own greedy run is the reference)."""

from __future__ import annotations

import time

import httpx
import pytest

openai = pytest.importorskip("openai")

from engine import SamplingParams  # noqa: E402
from tests.support.servers import scrape, value

MODEL = "smollm2-135m"
CHAT = [{"role": "user", "content": "Name three colours of the rainbow."}]


def test_streamed_greedy_chat_equals_the_engines_own_greedy_run(client, engine):
    ref = engine.submit(CHAT, SamplingParams(temperature=0, max_tokens=24))
    out = ref.result(120)
    stream = client.chat.completions.create(
        model=MODEL, messages=CHAT, temperature=0, max_tokens=24, stream=True, logprobs=True,
        top_logprobs=5, stream_options={"include_usage": True})
    text, tokens, tops, finish, usage = "", [], [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.logprobs is not None:
                for entry in choice.logprobs.content:
                    tokens.append(entry.token)
                    tops.append(entry.top_logprobs)
            finish = choice.finish_reason or finish
    assert text == out.text and text
    assert tokens == [ev.token_text for ev in ref.events]  # token by token, the same picks
    assert finish == str(out.finish_reason)
    assert usage.prompt_tokens == len(out.prompt_token_ids)
    assert usage.completion_tokens == len(out.token_ids) == len(tokens)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # top_logprobs=5: five alternatives per token, most likely first; greedy takes the first
    assert all(len(t) == 5 for t in tops)
    for tok, alts in zip(tokens, tops):
        lps = [a.logprob for a in alts]
        assert lps == sorted(lps, reverse=True) and alts[0].logprob <= 0
        assert tok in [a.token for a in alts]


def test_chat_usage_and_logprobs_without_streaming(client, engine):
    out = engine.generate(CHAT, SamplingParams(temperature=0, max_tokens=10))
    r = client.chat.completions.create(model=MODEL, messages=CHAT, temperature=0, max_tokens=10,
                                       logprobs=True, top_logprobs=5)
    assert r.choices[0].message.content == out.text
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(out.prompt_token_ids), 10)
    content = r.choices[0].logprobs.content
    assert len(content) == 10 and all(len(c.top_logprobs) == 5 for c in content)
    assert "".join(c.token for c in content) == out.text


@pytest.mark.slow
def test_n_2_returns_two_choices_with_derived_seeds(client):
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=7, n=2)
    r = client.completions.create(**kw)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.usage.completion_tokens == 24 and r.usage.prompt_tokens == 4
    assert r.choices[0].text != r.choices[1].text  # seeds 7 and 8
    again = client.completions.create(**kw)  # the same seed repeats both choices
    assert [c.text for c in again.choices] == [c.text for c in r.choices]
    streamed = {0: "", 1: ""}
    for chunk in client.completions.create(**kw, stream=True):
        for c in chunk.choices:
            streamed[c.index] += c.text
    assert [streamed[0], streamed[1]] == [c.text for c in r.choices]


@pytest.mark.slow
def test_n_samples_are_one_engine_request_prefilled_once_each_equal_to_its_seed(server, client):
    kw = dict(model=MODEL, prompt="Once upon a time, in a small village,", max_tokens=8,
              temperature=1.0, extra_body={"ignore_eos": True})
    before = _wait_idle(server)
    r = client.completions.create(**kw, seed=11, n=3)
    after = scrape(server)
    assert [c.index for c in r.choices] == [0, 1, 2]
    # one engine request: the prompt is counted (and prefilled) once, not once per choice
    assert value(after, "playground_prompt_tokens_total") - \
        value(before, "playground_prompt_tokens_total") == r.usage.prompt_tokens
    assert r.usage.completion_tokens == 24
    assert value(after, "playground_generation_tokens_total") - \
        value(before, "playground_generation_tokens_total") == 24  # every sample's tokens
    singles = [client.completions.create(**kw, seed=11 + i).choices[0].text for i in range(3)]
    assert [c.text for c in r.choices] == singles  # choice i samples with seed + i
    greedy = client.completions.create(**{**kw, "temperature": 0}, n=2)  # n requests, one answer
    assert greedy.choices[0].text == greedy.choices[1].text and greedy.usage.completion_tokens == 16


@pytest.mark.slow
def test_streamed_samples_each_end_when_they_finish_not_with_the_slowest(client):
    msgs = [{"role": "user", "content": "Say hi in one word."}]
    for seed in range(1, 6):  # a seed whose three samples differ in length
        order = []  # ("text" | "end", choice index) in arrival order
        for chunk in client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=60,
                                                    temperature=0.7, seed=seed, n=3, stream=True):
            for c in chunk.choices:
                if c.delta.content:
                    order.append(("text", c.index))
                if c.finish_reason:
                    order.append(("end", c.index))
        lengths = [sum(1 for kind, i in order if kind == "text" and i == k) for k in range(3)]
        if len(set(lengths)) > 1:
            break
    assert len(set(lengths)) > 1, lengths
    ends = {i: order.index(("end", i)) for i in range(3)}
    assert sorted(ends) == [0, 1, 2] and [kind for kind, _ in order].count("end") == 3
    for i, at in ends.items():  # nothing follows a choice's end for that choice
        assert ("text", i) not in order[at + 1:]
    short, long_ = lengths.index(min(lengths)), lengths.index(max(lengths))
    last_text_of_long = max(j for j, e in enumerate(order) if e == ("text", long_))
    assert ends[short] < last_text_of_long, order  # the short one ended while the long one ran


def test_samples_that_do_not_fit_the_pool_name_n(server):
    r = httpx.post(server + "/v1/completions", timeout=60, json={
        "model": MODEL, "prompt": "Hi", "max_tokens": 4000, "n": 16, "temperature": 1})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "n" and err["message"].startswith("n = 16")


def test_completion_logprobs_five_alternatives(client):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5,
                                  temperature=0, logprobs=5)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 5 == len(lp.token_logprobs) == len(lp.top_logprobs)
    assert all(len(alts) == 5 for alts in lp.top_logprobs)
    assert all(tok in alts for tok, alts in zip(lp.tokens, lp.top_logprobs))
    assert lp.text_offset[0] == 0


def test_a_completion_without_max_tokens_stops_at_16_as_openai_and_vllm_do(server):
    """OpenAI's legacy completions and vLLM default ``max_tokens`` to 16; unset or ``null``,
    a completion here stopped only at the context window (8,192 tokens)."""
    for body in ({}, {"max_tokens": None}):
        r = httpx.post(f"{server}/v1/completions", timeout=120, json={
            "model": MODEL, "prompt": "Count upwards: 1, 2, 3,", "temperature": 0,
            "ignore_eos": True, **body})
        assert r.status_code == 200, r.text
        usage, choice = r.json()["usage"], r.json()["choices"][0]
        assert usage["completion_tokens"] == 16 and choice["finish_reason"] == "length", body


@pytest.mark.parametrize("field, value", [
    ("temperature", -1), ("top_p", 0), ("top_p", 1.5), ("top_k", -5), ("min_p", 2),
    ("presence_penalty", 3), ("frequency_penalty", -3), ("repetition_penalty", 0),
    ("max_tokens", 0), ("n", 0), ("seed", -1), ("top_logprobs", 6), ("stop", [1]),
    ("temperature", "hot"),
])
def test_bad_value_is_a_400_naming_the_field(client, field, value):
    extra = {"logprobs": True} if field == "top_logprobs" else {}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=4,
                                       extra_body={field: value, **extra})
    err = info.value.body
    assert info.value.status_code == 400
    assert err["param"] == field and field in err["message"], err


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100_000}, "max_tokens"),
])
def test_bad_messages_are_400s_naming_the_field(server, body, param):
    r = httpx.post(server + "/v1/chat/completions", json={"model": MODEL, **body}, timeout=30)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err


def test_unknown_model_404_and_bad_json_400(server, client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=CHAT, max_tokens=2)
    assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"
    r = httpx.post(server + "/v1/completions", content=b"{not json", timeout=10,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    assert "Traceback" not in r.text
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def _wait_idle(server, timeout=20.0) -> dict:
    end = time.monotonic() + timeout
    while True:
        m = scrape(server)
        idle = value(m, "playground_num_requests_running") == 0 \
            and value(m, "playground_num_requests_waiting") == 0 \
            and value(m, "playground_kv_cache_usage_perc") == 0
        if idle or time.monotonic() > end:
            return m
        time.sleep(0.1)


def test_disconnect_mid_stream_aborts_and_frees_the_blocks(server):
    before = _wait_idle(server)
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 400, "temperature": 0.8,
            "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", server + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        got = 0
        for line in lines:
            if line.startswith("data: ") and '"content"' in line:
                got += 1
            if got >= 4:
                break
        during = scrape(server)  # the request holds KV blocks while it runs
        assert value(during, "playground_num_requests_running") == 1
        assert value(during, "playground_kv_cache_usage_perc") > 0
    # the connection is closed: the engine aborts the request and its blocks come back
    after = _wait_idle(server)
    assert value(after, "playground_num_requests_running") == 0
    assert value(after, "playground_kv_cache_usage_perc") == 0
    aborted = ("playground_request_success_total", "abort")
    assert value(after, aborted[0], finished_reason="abort") == \
        value(before, aborted[0], finished_reason="abort") + 1
    # it stopped long before 400 tokens
    assert value(after, "playground_generation_tokens_total") - \
        value(before, "playground_generation_tokens_total") < 400


def test_disconnect_while_waiting_for_a_whole_answer_aborts_it(server):
    before = _wait_idle(server)
    body = {"model": MODEL, "prompt": "Write a long story.", "max_tokens": 600,
            "temperature": 0.8, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server + "/v1/completions", json=body, timeout=httpx.Timeout(30, read=1.5))
    after = _wait_idle(server)
    assert value(after, "playground_kv_cache_usage_perc") == 0
    assert value(after, "playground_request_success_total", finished_reason="abort") == \
        value(before, "playground_request_success_total", finished_reason="abort") + 1


def test_metrics_parse_and_move_by_the_request(server, client):
    before = _wait_idle(server)
    r = client.completions.create(model=MODEL, prompt="Counting: one, two, three,", max_tokens=9,
                                  temperature=0)
    after = scrape(server)
    u = r.usage
    assert u.completion_tokens == 9

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("playground_prompt_tokens_total") == u.prompt_tokens
    assert delta("playground_generation_tokens_total") == 9
    assert delta("playground_request_success_total", finished_reason="length") == 1
    assert delta("playground_time_to_first_token_seconds_count") == 1
    assert delta("playground_e2e_request_latency_seconds_count") == 1
    assert delta("playground_inter_token_latency_seconds_count") == 8  # one per token after the first
    assert delta("playground_prefix_cache_queries_total") == u.prompt_tokens
    assert 0 < delta("playground_time_to_first_token_seconds_sum") <= \
        delta("playground_e2e_request_latency_seconds_sum")
    for gauge in ("playground_num_requests_running", "playground_num_requests_waiting",
                  "playground_kv_cache_usage_perc", "playground_num_preemptions_total"):
        assert (gauge, ()) in after
