"""Per-task defaults (`conf/task_defaults/<task>.yaml`, `optional task_defaults: ${task}` in train.yaml's
defaults list): they apply to their task only, the command line and an experiment still win, and a
plugin task may ship its own in `./conf/task_defaults/`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.tiny import TINY, TINY_RNN

PLUGIN_TASK = """
from attnx import register_task
from attnx.tasks.synthetic import ReverseTask


@register_task("short_reverse")
class ShortReverse(ReverseTask):
    \"\"\"reverse, registered under a plugin's name\"\"\"
"""


def test_a_plugin_task_ships_its_defaults_in_a_sweep_over_tasks(tmp_path: Path) -> None:
    """The real CLI in a launch folder of the user's: `./plugins/` registers a task, `./conf/task_defaults/`
    holds its defaults; `-m task=short_reverse,reverse` applies them to that task's run only."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "short_reverse.py").write_text(PLUGIN_TASK)
    (tmp_path / "conf" / "task_defaults").mkdir(parents=True)
    (tmp_path / "conf" / "task_defaults" / "short_reverse.yaml").write_text(
        "# @package _global_\nmodel:\n  dropout: 0.25\noptim:\n  lr: 0.002\ndecode:\n  max_len_ratio: 1.5\n"
    )
    sweep = tmp_path / "sweep"
    argv = ["train", "-m", "task=short_reverse,reverse", *TINY_RNN, *TINY, f"hydra.sweep.dir={sweep}"]
    env = os.environ | {"ATTNX_PLUGIN_PATH": "plugins", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "attnx.cli", *argv]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = (json.loads(p.read_text()) for p in sorted(sweep.rglob("results.json")))
    records = {r["choices"]["task"]: r for r in found}
    assert set(records) == {"short_reverse", "reverse"}
    assert all(r["status"] == "completed" for r in records.values())
    mine, other = records["short_reverse"]["config"], records["reverse"]["config"]
    # decode: a key of train.yaml's own, which the task's defaults follow (after `_self_`)
    chosen = [
        (c["classifier"]["dropout"], c["optim"]["lr"], c["decode"]["max_len_ratio"]) for c in (mine, other)
    ]
    assert chosen[0] == (0.25, 0.002, 1.5)
    assert chosen[1] == (0.1, 0.003, 2.0)
