"""Servers the API tests share: one ``python -m engine serve`` child process (fp32, the exact
reference) for the whole folder, its openai SDK client, and the in-process API on the session's
engine."""

import openai
import pytest

from engine.serve.app import create_server
from tests.support.servers import app_in_thread, engine_server


@pytest.fixture(scope="package")
def server():
    """Base URL of ``python -m engine serve --dtype float32`` on 127.0.0.1."""
    with engine_server("--dtype", "float32") as url:
        yield url


@pytest.fixture(scope="package")
def client(server):
    """The openai SDK pointed at :func:`server` (no retries, so a failure shows at once)."""
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def api(engine):
    """Base URL of the API on the session's engine, served by uvicorn in a thread."""
    app = create_server(engine)
    with app_in_thread(app) as url:
        yield url
    app.state.metrics.detach()
