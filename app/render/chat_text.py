"""Chat messages as the chat box should show them: the text as typed or generated, with Markdown.

Gradio's Chatbot renders each message as Markdown, and Markdown passes HTML through: a prompt
asking about ``<script>`` or ``<b>`` lost those words on the page (the sanitizer removed the
script, a ``<b>`` turned the rest bold, an ``<img>`` was fetched), while the model read them as
typed. :func:`literal_html` escapes ``&`` and ``<`` outside code, so the page shows the same
characters the model read and wrote; code spans and fenced blocks are left alone, since Markdown
already shows their contents literally (an escape there would be shown as ``&lt;``).
"""

from __future__ import annotations

import re

_CODE = re.compile(r"(?ms)^[ \t]{0,3}(`{3,}|~{3,}).*?(?:^[ \t]{0,3}\1[ \t]*$|\Z)"  # fenced block
                   r"|(`+)(?!`).+?(?<!`)\2(?!`)")                                     # code span


def literal_html(text: str) -> str:
    """``text`` with ``&`` and ``<`` outside code written as ``&amp;`` and ``&lt;``, so Markdown
    shows them as characters rather than reading them as HTML.

    A fence left open (an answer still streaming its code block) runs to the end of the text, as
    Markdown renders it. Everything else (emphasis, lists, links, code) is Markdown as before.
    """
    if "<" not in text and "&" not in text:   # most answers: nothing to escape (runs per frame)
        return text
    if "`" not in text and "~~~" not in text:  # no code anywhere
        return _escape(text)
    out, at = [], 0
    for m in _CODE.finditer(text):
        out.append(_escape(text[at:m.start()]))
        out.append(m.group(0))
        at = m.end()
    out.append(_escape(text[at:]))
    return "".join(out)


def _escape(part: str) -> str:
    return part.replace("&", "&amp;").replace("<", "&lt;")


def shown_messages(messages: list[dict]) -> list[dict]:
    """``{"role", "content"}`` messages with each content made literal (:func:`literal_html`)
    for the chat box; the conversation the engine reads keeps the plain text."""
    return [{**m, "content": literal_html(m["content"]) if isinstance(m.get("content"), str)
             else m.get("content")} for m in messages]
