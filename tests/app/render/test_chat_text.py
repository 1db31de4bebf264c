"""app.render.chat_text: HTML in a chat message is shown as characters, code and Markdown kept."""

import pytest

from app.render.chat_text import literal_html, shown_messages


@pytest.mark.parametrize("text,shown", [
    ("<script>alert(1)</script>", "&lt;script>alert(1)&lt;/script>"),
    ("a < b && c > d", "a &lt; b &amp;&amp; c > d"),
    ("&lt; is an entity", "&amp;lt; is an entity"),
    ("**bold** and _it_", "**bold** and _it_"),
    ("use `<div>` or ``a<b``, then <p>", "use `<div>` or ``a<b``, then &lt;p>"),
    ("```html\n<p>x</p>\n```\nthen <i>", "```html\n<p>x</p>\n```\nthen &lt;i>"),
    ("~~~\n<p>\n~~~", "~~~\n<p>\n~~~"),
    ("open fence:\n```py\nif a<b:", "open fence:\n```py\nif a<b:"),   # still streaming
    ("a lone ` and <b>", "a lone ` and &lt;b>"),
])
def test_literal_html(text, shown):
    assert literal_html(text) == shown


def test_shown_messages_keeps_roles_and_non_text_content():
    msgs = [{"role": "user", "content": "<b>"}, {"role": "assistant", "content": None}]
    assert shown_messages(msgs) == [{"role": "user", "content": "&lt;b>"},
                                    {"role": "assistant", "content": None}]
    assert msgs[0]["content"] == "<b>"
