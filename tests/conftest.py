"""Shared fixtures: one engine on the embedded model for the whole session (CPU, fp32)."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# engines built by tests decode eagerly unless a test asks for the compiled step: a background
# compile per engine would cost minutes of CPU; the compiled path has tests of its own
os.environ.setdefault("LLM_PLAYGROUND_COMPILE", "off")
# and an engine that does compile does it on its own thread: a compile process (the default on a
# first start, engine.worker.compiled.compile_process) would not see a test's stand-in compiler
os.environ.setdefault("LLM_PLAYGROUND_COMPILE_PROCESS", "0")


# the fast tier (``bash scripts/test.sh --fast``): every test that needs neither the embedded model
# nor a browser nor a GPU and is not marked slow, and those marked ``fast``: each part's quickest
# tests on the real model (they share one model load)
MODEL_FIXTURES = {"loaded", "engine"}
NOT_FAST = ("slow", "browser", "gpu")


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true",
                     help="run the fast tier only: each part's quick tests (docs/testing.md)")


def in_fast_tier(item) -> bool:
    """Whether ``item`` belongs to the fast tier (see ``MODEL_FIXTURES`` above)."""
    if item.get_closest_marker("fast") is not None:
        return True
    if any(item.get_closest_marker(name) is not None for name in NOT_FAST):
        return False
    return not MODEL_FIXTURES & set(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config, items):
    if config.getoption("--fast"):
        dropped = [item for item in items if not in_fast_tier(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if in_fast_tier(item)]
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # torch missing or broken: no GPU either way
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def loaded():
    """The embedded model loaded once: a ``engine.model.model_info.LoadedModel`` (fp32 on CPU)."""
    from engine.model.loader import load_model

    return load_model("smollm2-135m", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def engine(loaded):
    """A running ``LLMEngine`` on the embedded model, shared by the session's tests."""
    from engine import LLMEngine

    eng = LLMEngine(loaded)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium driven by Playwright, one per test module (browser tests skip or fail
    on their own when Chromium is missing, before this runs)."""
    from playwright import sync_api

    from tests.support.browser import ARGS, CHROMIUM

    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()
