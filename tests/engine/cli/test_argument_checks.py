"""The command line and ``/generate`` refuse contradictory or empty input instead of quietly
changing it, and the command line does so before the model loads."""

from __future__ import annotations

import os
import subprocess
import sys

import gradio as gr
import pytest

from tests.support.servers import ROOT


def run(*args, timeout=240):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("args, needle", [
    (["--prompt", ""], "prompt is empty"),
    (["--prompt", "   \n"], "prompt is empty"),
    (["--prompt", "Hi", "--beams", "4", "--temperature", "0.9"], "temperature"),
    (["--prompt", "Hi", "--raw", "--system", "Be brief."], "--system"),
    (["--prompt", "Hi", "--speculative", "draft", "--draft-model", "no-such-model"], "--draft-model 'no-such-model'"),
    (["--prompt", "Hi", "--speculative", "draft", "--draft-model", "org/not-cached"], "--draft-model 'org/not-cached'"),
    (["--prompt", "Hi", "--speculative", "draft", "--draft-model", "/"], "folder has no config.json"),
])
def test_generate_refuses_before_loading_the_model(args, needle):
    r = run("generate", *args)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.stderr
    assert "[load]" not in r.stderr  # refused before the model began to load


@pytest.mark.slow
def test_page_refuses_a_bad_draft_model_before_loading_the_target():
    """``python -m app`` checks ``--draft-model`` (and that ``--speculative draft`` has one)
    before it loads the model it serves."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    for args, needle in ((["--speculative", "draft", "--draft-model", "no-such-model"], "--draft-model 'no-such-model'"),
                         (["--speculative", "draft"], "needs --draft-model")):
        r = subprocess.run([sys.executable, "-m", "app", "--port", "1", *args], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 2 and needle in r.stderr and r.stderr.startswith("error:"), r.stderr
        assert "Loading" not in r.stdout and "Traceback" not in r.stderr  # the target never began to load


@pytest.fixture(scope="module")
def generate(engine, tmp_path_factory):
    from app.server.gradio_api import make_generate
    from app.state.playground import Playground

    pg = Playground(engine, trace_dir=tmp_path_factory.mktemp("traces"))
    yield make_generate(pg)
    pg.close()


def test_generate_endpoint_refuses_raw_with_a_system_prompt(generate, engine):
    before = engine.stats()
    with pytest.raises(gr.Error, match="system_prompt"):
        next(generate("Continue: 1, 2, 3,", temperature=0, max_tokens=4, raw=True,
                      system_prompt="Answer in French."))
    assert engine.stats().finished == before.finished  # nothing reached the engine
    # either alone is served
    assert list(generate("Continue: 1, 2, 3,", temperature=0, max_tokens=4, raw=True))[-1]
    assert list(generate("Say hi.", temperature=0, max_tokens=4,
                         system_prompt="Answer in French."))[-1]
