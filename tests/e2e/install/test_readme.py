"""The README's plugin example works as the README says: saved in ./plugins it passes the kit and
becomes a typed command-line choice."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from helpers.paths import REPO

README = REPO / "README.md"

CHECK = """
import sys
from attnx import registry
from attnx.cli import main
from attnx.testing import check_score
check_score(registry.get("score", "rbf"), bandwidth=0.5)
sys.exit(main(["train", "attention=dot", "score=rbf", "score.bandwidth=0.5", "--cfg", "job"]))
"""


def test_readme_plugin_example_passes_the_kit_and_composes(tmp_path: Path) -> None:
    section = README.read_text().split("## Writing a plugin", 1)[1]
    code = next(block for block in re.findall(r"```python\n(.*?)```", section, re.S) if '"rbf"' in block)
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "rbf.py").write_text(code)
    trusted = os.environ | {"ATTNX_PLUGIN_PATH": "plugins"}  # as the README says: a launch folder's plugins
    command = [sys.executable, "-c", CHECK]
    done = subprocess.run(command, cwd=tmp_path, env=trusted, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "name: rbf" in done.stdout and "bandwidth: 0.5" in done.stdout
