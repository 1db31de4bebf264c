"""Lesson requests, labelled as such: their request ids start with :data:`LESSON_PREFIX`.

A lesson's sweep (16 sequences at once, a 1,024-token prompt, a run without the KV cache) is not
what a user of the page waits for, so anything that summarizes the users' requests (the recent
requests' percentiles) can tell the two apart by the id alone; the block tables and the step strip
show the label too.
"""

from __future__ import annotations

import itertools
import os

LESSON_PREFIX = "lesson-"
_IDS = itertools.count(1)


def lesson_request_id(lesson: str) -> str:
    """A fresh request id for ``lesson``, e.g. ``"lesson-batch-12-9f2c"`` (unique in this process)."""
    return f"{LESSON_PREFIX}{lesson}-{next(_IDS)}-{os.urandom(2).hex()}"


def is_lesson_request(request_id: str | None) -> bool:
    """Whether a request id was made by :func:`lesson_request_id`."""
    return bool(request_id) and str(request_id).startswith(LESSON_PREFIX)


class LessonEngine:
    """An engine whose ``submit`` labels every request as ``lesson``'s, by id and with
    ``source="lesson"`` (the engine then keeps it out of the users' percentiles), and adds
    ``submit_kwargs``, such as the session's ``cache_salt``); everything else is the engine's.

    Lets an experiment written for a plain engine (``engine.experiments``) run as a lesson.
    """

    def __init__(self, engine, lesson: str, submit_kwargs: dict | None = None) -> None:
        self._engine = engine
        self._lesson = lesson
        self._kwargs = dict(submit_kwargs or {})

    def submit(self, prompt, params=None, **kwargs):
        """``engine.submit`` with a lesson request id (see :meth:`engine.LLMEngine.submit`)."""
        return self._engine.submit(prompt, params, **{**self._kwargs, **kwargs, "source": "lesson",
                                                      "request_id": lesson_request_id(self._lesson)})

    def generate(self, prompt, params=None, **kwargs):
        """Submit and wait, as ``engine.generate``."""
        return self.submit(prompt, params, **kwargs).result()

    def __getattr__(self, name):
        return getattr(self._engine, name)
