"""Fixtures the browser modules share: the pages they open, served once per module."""

import pytest

from tests.support.browser import serve_lessons, serve_page


@pytest.fixture(scope="module")
def lessons_url(engine):
    """A page holding only the Lessons tab on the shared engine."""
    url, demo = serve_lessons(engine)
    yield url
    demo.close()


@pytest.fixture(scope="module")
def page_url(engine, tmp_path_factory):
    """The whole page as ``python -m app`` serves it, on the shared engine."""
    url, close = serve_page(engine, tmp_path_factory.mktemp("traces"))
    yield url
    close()
