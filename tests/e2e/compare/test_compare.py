"""`attnx compare` end to end on a tiny suite: every arm runs where it can, the protocol chooses rates and
widths from real runs, a relaunch trains nothing, a compare killed with -9 resumes, and report.html
renders in a real browser."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from attnx.cli import main as cli

from helpers.browser import broken_images
from helpers.paths import REPO

TINY_SUITE = """# @package _global_
seeds: [0, 1]
tasks:
  reverse:
    overrides: [task=reverse, task.min_len=3, task.max_len=5, task.test_max_len=7, task.train_size={train},
                task.val_size=16, task.test_size=16, trainer.max_epochs={epochs},
                optim.scheduler.warmup_steps=0, encoder.embed_dim=8, encoder.hidden_dim=16,
                decoder.embed_dim=8, decoder.hidden_dim=16]
    metric: test/exact_match
    width: [encoder.hidden_dim, decoder.hidden_dim]
  mqar:
    overrides: [task=mqar, task.vocab_size=16, task.seq_len=16, task.num_kv_pairs=2, task.train_size=48,
                task.val_size=16, task.test_size=16, trainer.max_epochs=1, lm.d_model=16, lm.num_layers=1]
    metric: test/acc
    width: [lm.d_model]
"""
# none and additive meet the candidate; a small bench point; the basic launcher keeps runs in-process
ARGS = [
    "suite=tiny",
    "attention=local_window",
    "attention.window=1",
    "mechanisms=[none,additive]",
    "bench.n=16",
    "bench.dim=16",
    "bench.heads=2",
    "launcher=basic",
]


def suite(root: Path, train: int = 48, epochs: int = 1) -> Path:
    folder = root / "conf" / "suite"
    folder.mkdir(parents=True)
    (folder / "tiny.yaml").write_text(TINY_SUITE.format(train=train, epochs=epochs))
    return root / "conf"


def records(folder: Path) -> dict[int, dict]:
    return {int(p.parent.name): json.loads(p.read_text()) for p in folder.glob("*/results.json")}


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("compare")
    os.environ["ATTNX_CONFIG_PATH"] = str(suite(root))
    try:
        out = root / "out"
        protocol = ["protocol.lr_search=true", "protocol.lr_grid=[0.003,0.03]", "protocol.match_params=true"]
        args = [*ARGS, *protocol]
        assert cli(["compare", *args, f"out={out}"]) == 0
        first = {p: p.stat().st_mtime_ns for p in out.rglob("results.json")}
        import contextlib
        import io

        again = io.StringIO()
        with contextlib.redirect_stdout(again):
            assert cli(["compare", *args, f"out={out}"]) == 0
        assert {p: p.stat().st_mtime_ns for p in out.rglob("results.json")} == first  # nothing retrained
    finally:
        del os.environ["ATTNX_CONFIG_PATH"]
    return out, again.getvalue()


def test_every_arm_runs_where_the_task_can_host_it_and_the_report_says_where_not(
    compared: tuple[Path, str],
) -> None:
    out, relaunch = compared
    runs = records(out / "runs")
    arms = sorted({(r["choices"]["task"], r["choices"]["attention"]) for r in runs.values()})
    assert arms == [
        ("mqar", "additive"),
        ("reverse", "additive"),
        ("reverse", "local_window"),
        ("reverse", "none"),
    ]
    assert len(runs) == 8 and all(r["status"] == "completed" for r in runs.values())
    assert all(r["config"]["paired_embeddings"] and r["config"]["seed"] in (0, 1) for r in runs.values())
    judged = {r["choices"]["task"]: r["convergence"]["metric"] for r in runs.values()}
    assert judged == {"reverse": "val/exact_match", "mqar": "val/acc"}  # each task metric's val/ twin
    assert relaunch.count("all 8 runs completed") == 2  # lr_search/ and runs/: nothing launched

    report = (out / "report.md").read_text()
    assert "`none` on mqar: attention=none: NoAttention cannot be a causal self-attention layer" in report
    assert "`local_window` on mqar" in report
    assert "The family is the candidate `mechanism=local_window` against each other `mechanism`" in report
    assert "**What the seeds allow** (α = 0.05)" in report and "untestable" in report  # 2 seeds: floor 0.5
    assert (out / "verdicts.csv").read_text().startswith("task,mechanism a,mechanism b,family,n,")
    assert "## Ranking" in report and "## Cost" in report and "infer ms @ N=16" in report
    assert "## Convergence" in report and "## Discrimination" in report
    for figure in ("pareto_task_reverse.png", "test_exact_match_vs_length.png", "lr_sensitivity.png"):
        assert f"]({figure})" in report and (out / figure).read_bytes().startswith(b"\x89PNG")
    assert "runs/2/attention_maps/test/cross_0.png" in report  # additive, seed 0, on reverse
    rows = (out / "report.csv").read_text().splitlines()
    assert rows[0].startswith("task,mechanism,status,n,test/metric") and len(rows) == 1 + 4


def test_each_arm_trains_at_its_best_searched_rate_with_matched_parameters(
    compared: tuple[Path, str],
) -> None:
    out, _ = compared
    searched = records(out / "lr_search")
    assert len(searched) == 2 * 4 and all(r["config"]["test"] is False for r in searched.values())
    best: dict[tuple[str, str], tuple[float, float]] = {}
    for r in searched.values():
        key = (r["choices"]["task"], r["choices"]["attention"])
        metric = "val/exact_match" if key[0] == "reverse" else "val/acc"
        score = (r["metrics"][metric], r["config"]["optim"]["lr"])
        best[key] = max(best.get(key, score), score)
    runs = records(out / "runs").values()
    for r in runs:
        assert r["config"]["optim"]["lr"] == best[(r["choices"]["task"], r["choices"]["attention"])][1]
    params = {(r["choices"]["task"], r["choices"]["attention"]): r["params"] for r in runs}
    for (task, arm), count in params.items():
        assert abs(count / params[(task, "additive")] - 1) <= 0.1, (task, arm, count)
    assert "**Parameters matched** to `additive`'s within ±10%" in (out / "report.md").read_text()


@pytest.mark.browser
def test_report_html_renders_every_figure_and_a_row_per_configuration(
    compared: tuple[Path, str],
    page,
    tmp_path: Path,
) -> None:
    out, _ = compared
    page.goto((out / "report.html").as_uri())
    assert broken_images(page) == []
    assert page.locator("img").count() >= 6  # 2 Pareto, length, lr sensitivity, 3 heatmaps
    assert page.locator("#results tbody tr").count() == 4  # (task, mechanism) configurations
    assert page.locator("#ranking tbody tr").count() == 3
    assert page.locator("#ranking tr.highlight td").first.inner_text() == "local_window"
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


def test_a_compare_killed_with_sigkill_resumes_without_retraining_finished_runs(tmp_path: Path) -> None:
    config = suite(tmp_path, train=256, epochs=3)  # runs long enough to be killed between them
    env = {**os.environ, "ATTNX_CONFIG_PATH": str(config), "PYTHONUNBUFFERED": "1"}
    out = tmp_path / "out"
    command = [sys.executable, "-m", "attnx.cli", "compare", *ARGS, f"out={out}"]
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and first.poll() is None:
        done = [r for r in records(out / "runs").values() if r["status"] == "completed"]
        if len(done) >= 2:
            break
        time.sleep(0.2)
    assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    before = {i: r for i, r in records(out / "runs").items() if r["status"] == "completed"}
    assert 2 <= len(before) < 8

    again = subprocess.run([*command, "resume=auto"], cwd=REPO, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    after = records(out / "runs")
    assert len(after) == 8 and all(r["status"] == "completed" for r in after.values())
    for i, record in before.items():  # the finished runs were skipped, not trained again
        assert (after[i]["pid"], after[i]["started"]) == (record["pid"], record["started"])
    # the relaunch's plan holds only the runs left to train, each naming its own folder
    relaunched = OmegaConf.load(out / "runs" / "plan.yaml")
    folders = {int(job[-1].removeprefix("hydra.sweep.subdir=")) for job in relaunched}
    assert folders == set(range(8)) - set(before)
    assert (out / "report.html").exists()


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "conf" / "suite").glob("*.yaml")))
def test_every_shipped_suite_composes_and_every_task_hosts_its_mechanisms(name: str) -> None:
    from attnx import registry
    from attnx.compare.checks import check_arms
    from attnx.compare.cli import compose_compare
    from attnx.compare.keys import check_keys
    from attnx.compare.plan import Arm

    registry.load_all()
    cfg = compose_compare([f"suite={name}"])
    check_keys(cfg)
    arms = [Arm(m, (f"attention={m}",)) for m in cfg.mechanisms]
    hosted, refused, _ = check_arms(cfg, arms, [])
    assert set(hosted) == set(cfg.tasks) and len(cfg.seeds) >= 3
    # only the mechanisms that cannot be self-attention are refused, and only where the arms are
    # self-attention: an lm task's, or the encoder's (`site: encoder`)
    tasks = registry.registry("task")
    own = {
        t: next(o.split("=", 1)[1] for o in spec.overrides if o.startswith("task="))
        for t, spec in cfg.tasks.items()
    }
    self_attending = {
        t for t, spec in cfg.tasks.items() if spec.site == "encoder" or tasks.get(own[t]).model_type == "lm"
    }
    assert set(refused) == {(t, m) for t in self_attending for m in ("none", "fixed_c")}


MAD_SUITE = """# @package _global_
seeds: [0]
tasks:
  recall_16:
    overrides: [task=mqar, task.vocab_size=16, task.seq_len=16, task.num_kv_pairs=2, task.train_size=48,
                task.val_size=16, task.test_size=16, trainer.max_epochs=1, lm.d_model=16, lm.num_layers=1]
    metric: test/acc
    width: [lm.d_model]
    capability: recall
  recall_12:
    overrides: [task=mqar, task.vocab_size=16, task.seq_len=12, task.num_kv_pairs=2, task.train_size=48,
                task.val_size=16, task.test_size=16, trainer.max_epochs=1, lm.d_model=16, lm.num_layers=1]
    metric: test/acc
    width: [lm.d_model]
    capability: recall
  compression:
    overrides: [task=reverse, task.min_len=3, task.max_len=5, task.test_max_len=7, task.train_size=48,
                task.val_size=16, task.test_size=16, trainer.max_epochs=1, encoder=self_attn,
                attention=fixed_c]
    metric: test/exact_match
    site: encoder
"""


def test_mad_protocol_scores_the_best_grid_point_per_capability_at_matched_state(tmp_path: Path) -> None:
    """MAD in one command: every run at each grid point, each (task, arm) read at the point with its best
    validation metric (test read there only), a capability by the mean of its settings' scores, widths
    matched by decoding state, state as the Pareto cost; the seq2seq compression task puts the arms in its
    encoder and keeps its widths."""
    folder = tmp_path / "conf" / "suite"
    folder.mkdir(parents=True)
    (folder / "mad_tiny.yaml").write_text(MAD_SUITE)
    out = tmp_path / "out"
    args = ["suite=mad_tiny", "attention=linear", "mechanisms=[multi_head]", "baseline=multi_head"]
    args += [
        "protocol.grid.enabled=true",
        "protocol.grid.lr=[0.003,0.03]",
        "protocol.grid.weight_decay=[0.0]",
    ]
    args += ["protocol.match_state=true", "pareto=state", "launcher=basic", "bench.n=16", "bench.dim=16"]
    os.environ["ATTNX_CONFIG_PATH"] = str(tmp_path / "conf")
    try:
        assert cli(["compare", *args, f"out={out}"]) == 0
    finally:
        del os.environ["ATTNX_CONFIG_PATH"]
    runs = records(out / "runs")
    assert len(runs) == 3 * 2 * 2 and all(r["status"] == "completed" for r in runs.values())
    chosen: dict[tuple[str, str], tuple[float, float]] = {}  # (task, arm) -> (validation, test) read
    for i in sorted(runs):  # the grid's points in plan order: the first among equals on validation
        r = runs[i]
        task = (
            "compression" if r["choices"]["task"] == "reverse" else f"recall_{r['config']['task']['seq_len']}"
        )
        arm = (
            r["config"]["encoder"]["attention"]["name"]
            if task == "compression"
            else r["choices"]["attention"]
        )
        assert r["config"]["optim"]["optimizer"]["weight_decay"] == 0.0
        name = "exact_match" if task == "compression" else "acc"
        val, test = r["metrics"][f"val/{name}"], r["metrics"][f"test/{name}"]
        if (task, arm) not in chosen or val > chosen[(task, arm)][0]:
            chosen[(task, arm)] = (val, test)
        if task != "compression":
            assert (r["config"]["lm"]["d_model"] == 16) == (arm == "multi_head"), (
                task,
                arm,
            )  # linear's scaled
    best = {key: test for key, (_, test) in chosen.items()}
    assert {arm for task, arm in best if task == "compression"} == {"multi_head", "linear"}
    report = (out / "report.md").read_text()
    capabilities = re.sub(" +", " ", report.split("## Capabilities")[1].split("##")[0])  # cells unpadded
    for arm in ("multi_head", "linear"):
        recall = (best[("recall_16", arm)] + best[("recall_12", arm)]) / 2
        assert f"| {arm} | {recall:.3f} | {best[('compression', arm)]:.3f} |" in capabilities
    assert "**Grid**" in report and "**Decoding state matched**" in report
    assert "optimistic (as MAD)" not in report  # chosen on validation: MAD's own rule is an option
    assert "compression: its seq2seq model does not decode token by token" in report
    assert (
        "state bytes" in report and "No declared state, so not on the state axis: " in report
    )  # compression's
