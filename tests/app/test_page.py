"""app/page.py built on a fake engine: the tabs a text points to are tabs of the page, and the
sidebar's hints agree with the controls they describe."""

from __future__ import annotations

import re

import pytest

from app.state.playground import Playground
from tests.support.fakes import FakeEngine


@pytest.fixture(scope="module")
def components(tmp_path_factory):
    from app.page import build_demo

    pg = Playground(FakeEngine(), trace_dir=tmp_path_factory.mktemp("traces"), monitor=False)
    return build_demo(pg).config["components"]


def test_the_greedy_hint_names_the_sliders_default_repetition_penalty(components):
    by_id = {c["props"]["elem_id"]: c["props"] for c in components if c.get("props", {}).get("elem_id")}
    info, default = by_id["temperature"]["info"], by_id["rep-penalty"]["value"]
    assert "0 = greedy: the most likely token after the repetition penalty" in info
    assert default == 1.1 and f"({default:g} by default; 1 = plain greedy)" in info


def test_the_pages_bench_sends_the_api_the_pages_sampling_defaults(components):
    from app.bench.pages import PAGE_FILTERS

    labels = {"top_p": "top-p (nucleus)", "top_k": "top-k", "min_p": "min-p"}
    by_label = {c["props"].get("label"): c["props"] for c in components if c.get("type") == "slider"}
    assert {k: by_label[labels[k]]["value"] for k in PAGE_FILTERS} == PAGE_FILTERS


def test_the_explorer_and_the_beams_tab_point_to_each_other(components):
    """The sampling explorer names the "Beams and samples" tab and that tab's text names the
    explorer, both about the k-fold KV cache; each named tab is one of the page's tabs."""
    from app.render.beams import LESSON
    from app.tabs.lessons.sampling import TITLE, USE_CASES

    tabs = {c["props"].get("label") for c in components if c["type"] == "tabitem"}
    named = re.findall(r"\*\*([^*]+)\*\* tab", USE_CASES)
    assert named == ["Beams and samples"] and set(named) <= tabs
    assert "k times the KV cache" in USE_CASES and "k times the KV cache" in LESSON
    assert TITLE in tabs and TITLE.lower() in LESSON
