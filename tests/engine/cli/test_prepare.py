"""``python -m engine prepare``: the kernels and the embedded model's config, ahead of a start."""

import subprocess
import sys

from engine.cli.prepare import prepare


def test_prepare_reports_each_part_and_leaves_what_a_start_loads():
    """On this machine's cache (the other tests built it already, so this is quick): every part
    is named with what was done, and the config folder it names holds the config and tokenizer
    that a start reads instead of the GGUF's metadata."""
    from pathlib import Path

    lines = prepare()
    assert [line.split(":")[0] for line in lines[:4]] == [
        "paged attention kernel", "int4/int8 kernel", "row summary operator",
        "smollm2-135m config and tokenizer"]
    folder = Path(lines[3].split(": ", 1)[1])
    assert (folder / "config.json").exists() and (folder / "tokenizer.json").exists()
    assert lines[-1].startswith("prepared in ")


def test_the_command_is_listed():
    out = subprocess.run([sys.executable, "-m", "engine", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "prepare" in out.stdout
