"""app/ never imports torch: the page's modules load in a Python where torch is never imported."""

import ast
import subprocess
import sys

from tests.support.paths import REPO


def test_app_sources_never_import_torch():
    for path in (REPO / "app").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n == "torch" or n.startswith("torch.") for n in names), path.name


def test_pure_modules_load_without_torch():
    code = ("import sys; import app.render.figures, app.state.run_state, app.render.tokens, app.render.cards, app.render.fmt, app.server.assets, "
            "app.render.batch, app.page, app.server.main, app.state.playground, app.tabs.playground, "
            "app.tabs.lessons, app.remote, engine.protocol; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
