"""How the page is served: the launch settings that keep server files and errors private.

- ``show_error=False``: only ``gr.Error`` messages (written for the client) reach a client;
  Gradio's own exception texts, which can name server paths, stay in the server log.
- ``max_file_size``: every upload (the calculator's ``config.json`` is the page's only one) is
  capped at :data:`MAX_UPLOAD_BYTES`.
"""

from __future__ import annotations

MAX_UPLOAD_BYTES = 1 << 20  # 1 MiB


def launch(demo, host: str = "127.0.0.1", port: int | None = None, share: bool = False,
           max_threads: int = 40, **kwargs) -> tuple[str, str | None]:
    """``demo.launch`` with this module's settings, without blocking; returns
    ``(local_url, share_url)``. Extra keyword arguments (``theme``, ``css``...) go to ``launch``."""
    _, local_url, share_url = demo.launch(
        server_name=host, server_port=port, share=share, prevent_thread_lock=True, quiet=True,
        show_error=False, max_file_size=MAX_UPLOAD_BYTES, max_threads=max_threads,
        **kwargs)
    return local_url, share_url
