"""The sampling explorer's "Maths: greedy" example: its answer is checked against the sum, so
"17 + 25 = 32." is not shown without comment under "one answer is right"."""

import re

from app.tabs.lessons import sampling


def _answer(text: str) -> dict:
    prompt = next(p for label, p, *_ in sampling.EXAMPLES if label == "Maths: greedy")
    return {"prompt": prompt, "token_ids": [1, 2, 3], "text": text, "finish_reason": "stop",
            "settings": {"temperature": 0.0, "repetition_penalty": 1.0}}


def test_the_maths_examples_answer_is_checked_against_the_sum():
    prompt = _answer("")["prompt"]
    a, b = map(int, re.search(r"(\d+) \+ (\d+)", prompt).groups())
    wrong = sampling.answer_html(_answer("17 + 25 = 32."))
    assert f"The right answer is <b>{a + b}</b>; this answer does not" in wrong
    right = sampling.answer_html(_answer("42"))
    assert "this answer says it" in right
    assert "right answer" not in sampling.answer_html({**_answer("Blue."), "prompt": "Name a colour."})
    assert "Repeatable is not right" in sampling.USE_CASES
