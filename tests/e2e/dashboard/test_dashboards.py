"""Dashboards checked for real on one tiny 3-run sweep logged to CSV, TensorBoard and W&B (offline):
TensorBoard's own server opened in headless Chromium, W&B's offline run files read back record by
record, and the commands that serve (`attnx dashboard`) and upload (`attnx sync`) them."""

from __future__ import annotations

import json
import struct
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata
from wandb.proto import wandb_internal_pb2

from attnx.cli import main as cli

from helpers.browser import broken_images, free_port, serve
from helpers.tiny import ONE_EPOCH, TINY, TINY_MODEL, TINY_RNN, results, sizes, train

MECHANISMS = ("none", "additive", "dot")  # none draws no heatmap: the images tab must show the other two
NAMES = [f"{n}/attention={a}" for n, a in enumerate(MECHANISMS)]  # TensorBoard's run names
DRAWN = [*TINY_MODEL, *ONE_EPOCH, *sizes(), "callbacks.attention_heatmaps.num_examples=1"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The sweep, W&B without an account: offline, its settings in the sweep's own folders."""
    root = tmp_path_factory.mktemp("dashboards")
    with pytest.MonkeyPatch.context() as env:
        for name in ("WANDB_API_KEY", "WANDB_BASE_URL"):
            env.delenv(name, raising=False)
        env.setenv("WANDB_MODE", "offline")
        for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
            env.setenv(name, str(root / name.lower()))
        code = train(
            root / "sweep", "logger=many", f"attention={','.join(MECHANISMS)}", *TINY_RNN, *DRAWN, sweep=True
        )
    assert code == 0 and [r["status"] for r in results(root / "sweep")] == ["completed"] * 3
    written()
    yield root / "sweep"


def test_each_run_writes_one_event_file_named_by_its_overrides_with_its_hparams(sweep: Path) -> None:
    for n, (name, attention) in enumerate(zip(NAMES, MECHANISMS)):
        (events,) = (sweep / str(n)).rglob("events.out.tfevents.*")  # fit, validate and test share one
        assert events.parent.relative_to(sweep).as_posix() == name
        accumulator = EventAccumulator(str(events.parent)).Reload()
        content = accumulator.PluginTagToContent(hparams_metadata.PLUGIN_NAME)
        start = hparams_metadata.parse_session_start_info_plugin_data(
            content[hparams_metadata.SESSION_START_INFO_TAG]
        )
        assert (
            start.hparams["attention"].string_value == attention
            and start.hparams["task"].string_value == "reverse"
        )
        assert start.hparams["score"].string_value == ("–" if attention == "none" else attention)
        assert set(start.hparams) == {
            "attention",
            "task",
            "encoder",
            "decoder",
            "score",
        }  # not the fixed overrides
        metric = results(sweep)[n]["metrics"]["test/loss"]
        assert accumulator.Scalars("test/loss")[-1].value == pytest.approx(metric)


def shown(value: float) -> str:
    """A number as TensorBoard's HParams table shows it: 5 significant digits, JavaScript's toPrecision(5)."""
    return f"{value:#.5g}"


@pytest.mark.browser
def test_tensorboard_lists_the_sweep_by_overrides_and_compares_it_in_hparams(
    sweep: Path, page: Any, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    command = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(sweep),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
    ]
    with serve(command, url):
        page.set_default_timeout(60_000)  # TensorBoard loads the event files after it answers
        page.goto(url + "#scalars")
        for name in NAMES:  # the run selector
            page.get_by_text(name, exact=True).first.wait_for()
        page.get_by_text("test/exact_match", exact=True).first.wait_for()  # a chart of the test metric
        page.screenshot(path=tmp_path / "scalars.png")

        page.goto(url + "#hparams")
        grid = page.locator("vaadin-grid.session-group-table")  # HParams' table view (Polymer, shadow DOM)
        grid.get_by_text(NAMES[-1], exact=True).wait_for()  # the scalars page's, hidden now, is not it
        # The grid's rows are in its shadow root; each cell's text is slotted in from its light DOM.
        rows = grid.evaluate(
            """grid => Array.from(grid.shadowRoot.querySelectorAll('tr')).map(row =>
                Array.from(row.querySelectorAll('slot')).map(slot =>
                    slot.assignedElements().map(cell => cell.innerText.trim()).join(' ')))"""
        )
        header, *body = rows
        page.screenshot(path=tmp_path / "hparams.png")
        table = {row[0]: dict(zip(header, row)) for row in body if row[0]}
        assert sorted(table) == NAMES
        for name, attention, record in zip(NAMES, MECHANISMS, results(sweep)):
            assert table[name]["attention"] == attention
            for metric in ("test/exact_match", "test/loss"):
                assert table[name][metric] == shown(record["metrics"][metric]), (name, metric)

        page.goto(url + "#images")
        for name in NAMES[1:]:  # a heatmap from each run with attention weights, on a card naming the run
            card = page.locator("tf-image-loader", has_text=name)
            card.locator("img").wait_for()
            # decode() settles once the image is decoded, and fails if it cannot be
            widths = card.locator("img").evaluate_all(
                "images => Promise.all(images.map(i => i.decode().then(() => i.naturalWidth)))"
            )
            assert len(widths) == 1 and widths[0] > 100
        assert page.locator("tf-image-loader").count() == 2 and not broken_images(page)
        page.screenshot(path=tmp_path / "images.png")


def test_attnx_dashboard_serves_the_sweep_and_prints_its_url(sweep: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    command = [
        sys.executable,
        "-m",
        "attnx.cli",
        "dashboard",
        str(sweep),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
    ]
    with serve(command, url) as printed:
        assert f"attnx dashboard: TensorBoard on {sweep} at {url} (Ctrl+C stops it)" in printed()
        runs: list[str] = []
        for _ in range(300):  # TensorBoard reads the folder after it answers: until it lists the runs
            runs = json.load(urllib.request.urlopen(url + "data/runs", timeout=5))
            if len(runs) == len(NAMES):
                break
            time.sleep(0.2)
        assert runs == NAMES


def wandb_records(path: Path) -> Iterator[Any]:
    """The records of a W&B run file (`run-<id>.wandb`) as wandb-core writes it, since wandb 0.31's Python
    package has no reader of its own: a 7-byte header (":W&B", magic, version), then LevelDB's log
    format, 32 KiB blocks of chunks, each with a 7-byte header (CRC-32C, length, type: 1 full, 2 first,
    3 middle, 4 last); the joined chunks are `Record` protobufs. Checksums are not verified."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is no W&B run file"
    position, pending = 7, b""
    while position + 7 <= len(data):
        left = 32768 - position % 32768
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if left < 7 or kind == 0:  # a block's zero padding: the next chunk starts in the next block
            position += left
            continue
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            yield wandb_internal_pb2.Record.FromString(pending)


def test_wandb_offline_runs_hold_the_group_name_config_and_heatmaps(sweep: Path) -> None:
    for n, attention in enumerate(MECHANISMS):
        folder = sweep / str(n) / "wandb"
        (run_file,) = folder.glob("offline-run-*/run-*.wandb")  # in the run folder, one per job
        records = list(wandb_records(run_file))
        runs = [r.run for r in records if r.HasField("run")]
        assert {run.run_id for run in runs} == {(folder / "attnx-run-id").read_text().strip()}
        assert {run.run_group for run in runs} == {str(sweep)}  # one group per sweep
        assert {run.display_name for run in runs} == {f"attention={attention}"}  # what distinguishes it
        assert any({"reverse", "rnn", attention} <= set(run.tags) for run in runs)
        updates = [u for r in records if r.HasField("config") for u in r.config.update]
        config = {
            u.key: json.loads(u.value_json)
            for u in [*updates, *(u for run in runs for u in run.config.update)]
        }
        assert config["attention"]["name"] == attention and config["encoder"]["hidden_dim"] == 16
        history = [item for r in records if r.HasField("history") for item in r.history.item]
        logged = {item.key or "/".join(item.nested_key) for item in history}
        assert {"test/exact_match", "val/loss"} <= logged
        files = [f.path for r in records if r.HasField("files") for f in r.files.files]
        heatmaps = [f for f in files if f.startswith("media/images/test/attention/cross")]
        assert len(heatmaps) == (0 if attention == "none" else 1)
        assert all((run_file.parent / "files" / f).read_bytes()[:4] == b"\x89PNG" for f in heatmaps)
        (end,) = [r.exit for r in records if r.HasField("exit")]
        assert end.exit_code == 0  # finished, not cut short


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B without an account, its settings under `tmp_path`; wandb's own messages shown."""
    for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_SILENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))


def written() -> None:
    """Wait until W&B's service has written and closed every run file: `wandb.finish` can return while
    it still holds a run's records in its buffer (seen under load), and reading then finds none."""
    import wandb

    wandb.teardown()


def run_ids(folder: Path) -> list[str]:
    """The run id of each offline W&B run in `folder`'s wandb/, oldest first."""
    written()
    files = sorted(folder.glob("wandb/offline-run-*/run-*.wandb"))
    return [next(r.run.run_id for r in wandb_records(f) if r.HasField("run")) for f in files]


def test_resume_auto_continues_the_same_wandb_run(offline: None, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert train(run, "logger=wandb", "resume=auto", *TINY) == 0
    assert train(run, "logger=wandb", "resume=auto", *TINY, "trainer.max_epochs=2") == 0  # one epoch more
    (record,) = results(run)
    assert record["resumed_from"] == str(run / "checkpoints" / "last.ckpt") and record["epochs"] == 2
    first, second = run_ids(run)
    assert first == second == (run / "wandb" / "attnx-run-id").read_text().strip()
    assert train(run, "logger=wandb", *TINY) == 0  # without resume=auto: trained afresh, a new W&B run
    # folders are named by the second a run started: the last two may share it, so their order is the ids'
    ids = run_ids(run)
    assert len(ids) == 3 and ids.count(first) == 2 and len(set(ids)) == 2


def test_attnx_sync_hands_the_offline_runs_to_wandb_sync_after_checking_login_and_server(
    sweep: Path, offline: None, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    files = sorted(sweep.glob("*/wandb/offline-run-*/run-*.wandb"))
    capfd.readouterr()
    assert cli(["sync", str(sweep), "--dry-run"]) == 0  # wandb sync's own dry run: needs no login
    said = "".join(capfd.readouterr())
    assert "Would sync 3 run(s)" in said and all(f.name in said for f in files)

    assert cli(["sync", str(sweep)]) == 2
    (line,) = capfd.readouterr().err.splitlines()
    assert (
        line.startswith("attnx sync: not logged in to W&B: run `wandb login`") and "3 offline run(s)" in line
    )

    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens: connection refused
    assert cli(["sync", str(sweep)]) == 1
    (line,) = capfd.readouterr().err.splitlines()
    assert line.startswith("attnx sync: cannot reach the W&B server at http://127.0.0.1:9: ")
