"""Events whose progress is hidden leave the browser's loading-status refresh.

Gradio 6.31's front end keeps a loading status for every component that an event it has run
shows progress on: by default the event's outputs (``show_progress_on`` otherwise). On *every*
message of *every* event it then refreshes all of them, each one found by a walk of the page's
tree and its value snapshotted (``structuredClone``; for a layout block, every component inside
it). ``show_progress="hidden"`` hides the animation but keeps that work: profiled on one page
(CDP ``Profiler``, 1-token answers), the refresh took about 70 ms of the browser's main thread
per answer, the largest item of a run's fixed cost (docs/performance.md, "A light page").

:func:`untrack_hidden_progress` gives every such event an empty ``show_progress_on``: the front
end then tracks no component for it (its targets are ``show_progress_on`` when that is set, an
empty list included), and a message of that event refreshes nothing. An event that wants a
component's loading status (the chat's "…" bubble while a prompt waits) names it in
``show_progress_on`` itself, and is left as it is.
"""

from __future__ import annotations


def untrack_hidden_progress(blocks) -> list[str]:
    """Give every event of ``blocks`` with ``show_progress="hidden"`` and no ``show_progress_on``
    an empty ``show_progress_on`` (see the module's docstring).

    Call it inside the ``gr.Blocks`` context, after the last listener is attached: Gradio writes
    the page's config when the context exits.

    Args:
        blocks: a ``gr.Blocks`` being built.

    Returns:
        The names of the functions changed (for logs and tests).
    """
    changed = []
    for fn in blocks.fns.values():
        if fn.show_progress == "hidden" and fn.show_progress_on is None:
            fn.show_progress_on = []
            changed.append(fn.name or "js")
    return changed
