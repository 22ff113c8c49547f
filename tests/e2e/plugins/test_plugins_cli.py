"""Plugins end to end: discovery from ATTNX_PLUGIN_PATH and entry points via the real `attnx plugins`
CLI, import errors naming the file, and the plugins shipped in attnx.contrib passing the kit."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnx import registry

from helpers.paths import REPO
from helpers.tiny import TINY_BUDGET, TINY_LM, completed

ATTNX = Path(sys.executable).parent / "attnx"


LAPLACE = '''
"""f(q, k) = -‖q − k‖₁ / scale"""
import torch
from attnx import Score, register_score, require_equal_dims


@register_score("{name}")
class LaplaceScore(Score):
    def __init__(self, query_dim: int, key_dim: int, scale: float = 1.0) -> None:
        super().__init__(query_dim, key_dim)
        require_equal_dims(self)
        self.scale = scale

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return -(query.unsqueeze(-2) - keys.unsqueeze(-3)).abs().sum(-1) / self.scale
'''


def attnx(
    *args: str, cwd: Path, plugin_path: Path | None = None, site: Path | None = None
) -> subprocess.CompletedProcess:
    """`attnx plugins ARGS` with ATTNX_PLUGIN_PATH=plugin_path and `site` (installed packages) on its path."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNX_PLUGIN_PATH": str(plugin_path or "")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [ATTNX, "plugins", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_plugin_on_path_is_listed_and_passes_check(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "laplace.py").write_text(LAPLACE.format(name="laplace"))
    listing = attnx(cwd=tmp_path, plugin_path=folder)
    assert listing.returncode == 0, listing.stderr
    line = next(line for line in listing.stdout.splitlines() if line.split()[:2] == ["|", "laplace"])
    assert str(folder / "laplace.py") in line and "scale=1.0" in line
    assert "| gaussian " in listing.stdout  # shipped with attnx: found from any folder
    checked = attnx("check", "laplace", cwd=tmp_path, plugin_path=folder)  # one name: what involves it
    assert checked.returncode == 0, checked.stdout
    assert "PASS  attention dot score=laplace\n      compile: compiles\n" in checked.stdout
    assert (
        "PASS  score laplace" in checked.stdout
        and "PASS  attention multi_head score=laplace" in checked.stdout
    )
    assert "score=gaussian" not in checked.stdout and "attention linear" not in checked.stdout


HEADS = """
from attnx import MultiHeadAttention, register_attention


@register_attention("heads_test")
class Heads(MultiHeadAttention):
    pass  # multi_head, as a user's plugin
"""


def test_check_runs_the_whole_kit_at_the_values_given(tmp_path: Path) -> None:
    checked = attnx("check", "sliding_window", "attention.window=4", "attention.dropout=0.1", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "PASS  attention sliding_window score=alibi\n" in checked.stdout
    wide = attnx(
        "check", "multi_head", "attention.num_heads=16", "d_model=64", "score.num_buckets=8", cwd=tmp_path
    )
    assert wide.returncode == 0, wide.stdout + wide.stderr  # t5_bias's buckets set, the others untouched
    assert "PASS  attention multi_head score=t5_bias\n" in wide.stdout


def test_a_valid_setting_of_a_user_plugin_trains_at_the_runs_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """num_heads=16 at d_model=64: the kit checks the plugin at the run's widths, not at its own 8."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "heads.py").write_text(HEADS)
    monkeypatch.setenv("ATTNX_PLUGIN_PATH", str(tmp_path / "plugins"))
    wide = ["attention=heads_test", "attention.num_heads=16", "lm.d_model=64"]
    record = completed(tmp_path / "run", *TINY_LM, *TINY_BUDGET, *wide)
    assert record["choices"]["attention"] == "heads_test"


def test_check_one_attention_by_alias_and_an_unknown_name(tmp_path: Path) -> None:
    checked = attnx("check", "bahdanau", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert "PASS  attention additive score=dot" in lines and "PASS  attention additive score=rope" in lines
    assert not [line for line in lines if line.startswith("PASS  score")], lines  # no score alone
    unknown = attnx("check", "t5", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.startswith(
        "attnx plugins check: error: unknown score or attention 't5' (did you mean 't5_bias'?); scores: "
    )
    registry.load_all()  # what the command lists: attnx's own and the shipped plugins (not another test's)
    attention = registry.registry("attention")
    shipped = sorted(n for n in attention.names() if attention.entry(n).cls.__module__.startswith("attnx."))
    assert f"attentions: {', '.join(shipped)}" in unknown.stderr


def test_failing_checks_exit_1(tmp_path: Path) -> None:
    (tmp_path / "unused_param.py").write_text(
        "import torch\nfrom attnx import Score, register_score\n\n\n@register_score('unused_param')\n"
        "class UnusedParam(Score):\n"
        "    def __init__(self, query_dim: int, key_dim: int) -> None:\n"
        "        super().__init__(query_dim, key_dim)\n"
        "        self.w = torch.nn.Parameter(torch.ones(1))\n\n"
        "    def forward(self, query, keys):\n"
        "        return query.sum(-1, keepdim=True) + keys.sum(-1).unsqueeze(-2)\n"
    )
    checked = attnx("check", cwd=REPO, plugin_path=tmp_path)
    assert checked.returncode == 1
    assert (
        "FAIL  score unused_param: parameters (every parameter does something): score UnusedParam "
        "(perturbed parameters, train mode): parameter 'score.w' (1,) takes part in no call's computation"
        in checked.stdout
    )
    assert "PASS  attention local_window score=gaussian" in checked.stdout  # shipped with attnx


def test_plugin_import_error_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('half-written plugin')\n")
    result = attnx(cwd=tmp_path, plugin_path=tmp_path)
    assert result.returncode == 2
    expected = f"plugin {tmp_path / 'broken.py'} failed to import: RuntimeError: half-written plugin"
    assert result.stderr.strip().splitlines() == [f"attnx plugins: error: {expected}"]


DEMO_DIST = "attnxdemoplugin"


@pytest.fixture
def installed_plugin(tmp_path: Path) -> Path:
    """A folder holding a tiny installed distribution with an `attnx.plugins` entry point. Installed
    there, not into the venv, so no other test (another xdist worker's) sees it come and go."""
    dist, source, site = DEMO_DIST, tmp_path / "source", tmp_path / "site"
    source.mkdir()
    (source / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{dist}"\nversion = "0.1"\n\n'
        f'[project.entry-points."attnx.plugins"]\nlaplace = "{dist}"\n\n'
        f'[tool.setuptools]\npy-modules = ["{dist}"]\n'
    )
    (source / f"{dist}.py").write_text(LAPLACE.format(name="laplace_ep"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps"]
    subprocess.run([*pip, "--no-build-isolation", "--target", str(site), str(source)], check=True)
    return site


def test_entry_point_plugin_is_listed_with_its_distribution(installed_plugin: Path, tmp_path: Path) -> None:
    listing = attnx(cwd=tmp_path, site=installed_plugin)
    assert listing.returncode == 0, listing.stderr
    line = next(line for line in listing.stdout.splitlines() if line.split()[:2] == ["|", "laplace_ep"])
    assert f"dist {DEMO_DIST}" in line and "scale=1.0" in line
    checked = attnx("check", cwd=tmp_path, site=installed_plugin)
    assert checked.returncode == 0, checked.stdout
    assert (
        "PASS  score laplace_ep" in checked.stdout
        and "PASS  attention dot score=laplace_ep" in checked.stdout
    )


def test_plugins_command_does_not_import_lightning() -> None:
    code = "import sys, attnx.plugins as p; p.main([]); print([m for m in sys.modules if 'lightning' in m])"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]" and "multi_head" in result.stdout


def test_a_shipped_plugin_copied_under_its_own_name_is_refused_naming_the_copy(tmp_path: Path) -> None:
    """Shipped plugins come from attnx's entry points, before any folder: a copy that keeps the
    registered name is the plugin that fails, with both places named, not a silent second `gaussian`."""
    copy = tmp_path / "gaussian.py"
    copy.write_text((REPO / "attnx" / "contrib" / "gaussian.py").read_text())
    result = attnx(cwd=tmp_path, plugin_path=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"attnx plugins: error: plugin {copy} failed to import: RegistryError: ")
    assert "score 'gaussian' is registered twice: at " in line
    assert str(REPO / "attnx" / "contrib" / "gaussian.py") in line and f"and at {copy}:" in line


SLOW = "import time\n\ntime.sleep(600)  # an import that never returns\n"


# each command as a user types it; the plugin's import happens before any of them checks its arguments
HANGING = [
    ["plugins"],
    ["train", "task=reverse"],
    ["bench"],
    ["predict", "ckpt=model.ckpt", "input=abc"],
    ["compare", "attention=linear"],
]


@pytest.mark.parametrize("command", HANGING, ids=lambda c: c[0])
def test_a_hanging_plugin_import_is_named_and_ctrl_c_stops_it_in_one_line(
    command: list[str], tmp_path: Path
) -> None:
    plugin = tmp_path / "mine" / "slow.py"
    plugin.parent.mkdir()
    plugin.write_text(SLOW)
    # SIGINT as a shell gives it: a test worker may pass it on ignored or blocked (an ignored signal stays
    # ignored across exec), and Python then raises no KeyboardInterrupt
    code = (
        "import signal; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
        "signal.signal(signal.SIGINT, signal.default_int_handler); "
        "import sys, attnx.registry.discovery as d; d.SLOW_IMPORT_S = 0.2; import attnx.cli; "
        "sys.exit(attnx.cli.main())"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNX_PLUGIN_PATH": str(plugin.parent)}
    slow = f"attnx: importing plugin {plugin} has taken 0.2 s so far (Ctrl-C stops)"
    err = tmp_path / "stderr.txt"
    with err.open("w") as sink:
        process = subprocess.Popen([sys.executable, "-c", code, *command], cwd=tmp_path, env=env, stderr=sink)
        try:
            for _ in range(1200):  # a guard against a test that hangs, not a speed limit
                if slow in err.read_text() or process.poll() is not None:
                    break
                time.sleep(0.1)
            assert err.read_text().splitlines() == [slow]
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=60) == 130
        finally:
            process.kill()
    interrupted = f"attnx {command[0]}: interrupted while importing plugin {plugin}"
    assert err.read_text().splitlines() == [slow, interrupted]  # no traceback
