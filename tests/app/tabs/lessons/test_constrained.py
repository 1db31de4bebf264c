"""The "Constrained decoding" lesson on the embedded model: the constrained answer follows the
schema with free whitespace, the compact one has none between tokens, the free one is checked
against the schema, and the mask figure has one bar per token."""

import json

from app.tabs import lessons
from app.tabs.lessons import constrained
from app.tabs.lessons.runs import is_lesson_request


def test_the_constrained_decoding_lesson_runs(engine, monkeypatch):
    seen = []
    submit = engine.submit

    def spy(prompt, params=None, **kwargs):
        seen.append(kwargs)
        return submit(prompt, params, **kwargs)

    monkeypatch.setattr(engine, "submit", spy)
    free, held, compact, fig, note = constrained.run_lesson(engine, "A person", "", 0, 48,
                                                            {"cache_salt": "session-salt"})
    text = held.strip("`").removeprefix("json\n").strip()
    assert set(json.loads(text)) == {"name", "age"}
    compact_text = compact.strip("`").removeprefix("json\n").strip()
    assert compact_text.startswith('{"') and "\n" not in compact_text and ": " not in compact_text
    assert "Forced compact:" in note and ("complete" in note or "token limit" in note)
    assert free.startswith("```") and "forced" in note
    assert "free answer" in note.lower()
    bars = fig.data[0]
    assert len(bars.x) == len(bars.y) > 3 and all(0 <= y <= 1 for y in bars.y)
    # both runs are lesson requests, under the session's own prefix-cache salt
    assert len(seen) == 3 and all(k["source"] == "lesson" and is_lesson_request(k["request_id"])
                                  and k["cache_salt"] == "session-salt" for k in seen)


def test_the_lesson_is_registered_with_the_shape_of_the_others():
    assert "constrained" in lessons.LESSONS
    assert constrained.TITLE == "Constrained decoding" and constrained.TEXT.startswith("### ")
    assert callable(constrained.build)
