"""``python -m app --lessons off``: the Lessons tab is a note, and no lesson event exists for a
client of the queue API to call; the default keeps them."""

from __future__ import annotations

from app.tabs.lessons import OFF_NOTE


def markdown_values(demo) -> list[str]:
    return [str(getattr(b, "value", "")) for b in demo.blocks.values()
            if type(b).__name__ == "Markdown"]


def lesson_events(demo) -> list[str]:
    return [f.fn.__name__ for f in demo.fns.values()
            if getattr(f.fn, "__module__", "").startswith("app.tabs.lessons")]


def test_lessons_off_leaves_a_note_and_no_event(run_cli):
    seen = {}

    def probe(demo, eng):
        seen["notes"], seen["events"] = markdown_values(demo), lesson_events(demo)

    code, _ = run_cli(probe, "--lessons", "off")
    assert code == 0
    assert OFF_NOTE in seen["notes"] and seen["events"] == []
    code, _ = run_cli(probe)
    assert code == 0 and OFF_NOTE not in seen["notes"] and "on_quant" in seen["events"]
