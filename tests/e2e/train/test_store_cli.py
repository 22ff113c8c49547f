"""The run store end to end: `attnx train store=DIR` keeps a finished run and a second run of the same key
takes it instead of training (the same numbers as training it), a changed hyperparameter trains, two
processes wanting one key at once train it once, and a compare of a second candidate trains only the
candidate's runs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from test_faults import ended, launch

from attnx.cli import main as cli

from helpers.markdown import table
from helpers.tiny import TINY, TINY_RNN, results, train

RUN = [*TINY_RNN, *TINY, "attention=additive"]


def record(folder: Path) -> dict:
    (found,) = results(folder)
    return found


def test_a_stored_run_is_taken_with_the_numbers_training_gives(tmp_path: Path) -> None:
    store = f"store={tmp_path / 'store'}"
    assert train(tmp_path / "plain", *RUN) == 0
    assert train(tmp_path / "first", *RUN, store) == 0
    assert train(tmp_path / "second", *RUN, store) == 0
    plain, first, second = (record(tmp_path / n) for n in ("plain", "first", "second"))
    assert "stored" not in first and second["stored"]["from"] == str(tmp_path / "first")
    assert plain["metrics"] == first["metrics"] == second["metrics"]  # same key, same numbers
    assert second["output_dir"] == str(tmp_path / "second")
    assert Path(second["checkpoint"]).is_file() and Path(second["checkpoint"]).is_relative_to(
        tmp_path / "second"
    )
    assert train(tmp_path / "other", *RUN, store, "optim.lr=0.01") == 0
    assert "stored" not in record(tmp_path / "other")  # another key: trained
    assert cli(["store", "ls", "--store", str(tmp_path / "store")]) == 0


def test_two_processes_wanting_one_run_train_it_once(tmp_path: Path) -> None:
    store = f"store={tmp_path / 'store'}"
    children = [
        launch(["train", *RUN, store, f"hydra.run.dir={tmp_path / name}"], tmp_path / f"{name}.out")
        for name in ("a", "b")
    ]  # forked: both at once, Lightning imported already
    for child in children:
        ended(child, 0, seconds=300)
    a, b = record(tmp_path / "a"), record(tmp_path / "b")
    assert sorted("stored" in r for r in (a, b)) == [False, True]  # one trained, the other waited and took it
    assert a["metrics"] == b["metrics"]


def test_an_unwritable_store_is_one_line_and_trains_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert train(tmp_path / "run", *RUN, f"store={blocked / 'store'}") == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"attnx train: store={blocked / 'store'}: cannot write to"), err
    assert not (tmp_path / "run" / "checkpoints").exists()


SUITE = """# @package _global_
seeds: [0, 1]
tasks:
  reverse:
    overrides: [task=reverse, task.min_len=3, task.max_len=5, task.train_size=48, task.val_size=16,
                task.test_size=16, trainer.max_epochs=1, optim.scheduler.warmup_steps=0, encoder.embed_dim=8,
                encoder.hidden_dim=16, decoder.embed_dim=8, decoder.hidden_dim=16]
    metric: test/exact_match
"""
ARGS = [
    "suite=tiny",
    "mechanisms=[none,additive]",
    "bench.n=16",
    "bench.dim=16",
    "bench.heads=2",
    "launcher=basic",
]


@pytest.fixture
def tiny_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`suite=tiny` (SUITE) in a config folder of this test's, which is also where it launches from."""
    (tmp_path / "conf" / "suite").mkdir(parents=True)
    (tmp_path / "conf" / "suite" / "tiny.yaml").write_text(SUITE)
    monkeypatch.setenv("ATTNX_CONFIG_PATH", str(tmp_path / "conf"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("tiny_suite")
def test_a_second_candidate_trains_only_its_own_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    store = f"store={tmp_path / 'store'}"
    first, second = tmp_path / "window1", tmp_path / "window2"
    assert cli(["compare", *ARGS, store, "attention=local_window", "attention.window=1", f"out={first}"]) == 0
    # what the second would run: the classic arms' 4 runs are in the store, the candidate's 2 to train
    capsys.readouterr()
    assert cli(["compare", *ARGS, store, "attention=local_window", "attention.window=2", "--plan"]) == 0
    planned = capsys.readouterr().out
    rows = {cells[1]: cells[3:] for cells in table(planned, "| task | arm |")}
    assert rows == {"none": ["2", "2", "0"], "additive": ["2", "2", "0"], "local_window": ["2", "0", "2"]}
    assert "6 runs (0 of them the learning-rate search): 4 found in the run store at" in planned
    assert "2 to train; one at a time: ~0:" in planned and "Nothing was trained (plan=true)." in planned
    assert not (tmp_path / "compare").exists()  # its default folder: nothing written
    assert (
        cli(["compare", *ARGS, store, "attention=local_window", "attention.window=2", f"out={second}"]) == 0
    )
    runs = {
        out: {
            (r["choices"]["attention"], r["config"]["seed"]): r
            for r in map(read, out.glob("runs/*/results.json"))
        }
        for out in (first, second)
    }
    assert not any("stored" in r for r in runs[first].values())  # an empty store: all trained
    for (arm, seed), run in runs[second].items():
        assert ("stored" in run) == (arm != "local_window"), (
            arm,
            seed,
        )  # the classic arms came from the store
        if arm != "local_window":
            assert run["metrics"] == runs[first][(arm, seed)]["metrics"]
    report = (second / "report.md").read_text()
    rows = {cells[0]: cells[1:3] for cells in table(report, "| mechanism | from the store")}
    assert rows == {"none": ["2", "0"], "additive": ["2", "0"], "local_window": ["0", "2"]}


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_compare_refuses_an_unwritable_store_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "file").write_text("")
    out = tmp_path / "out"
    code = cli(["compare", "attention=local_window", f"store={tmp_path / 'file' / 'x'}", f"out={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        code == 2 and len(err) == 1 and err[0].startswith(f"attnx compare: store={tmp_path / 'file' / 'x'}: ")
    )
    assert not out.exists()


def test_store_ls_and_prune_say_what_is_there(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "store"
    assert train(tmp_path / "run", *RUN, f"store={root}") == 0
    capsys.readouterr()
    assert cli(["store", "ls", "--store", str(root)]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].startswith(f"run store {root}: 1 runs, ") and "reverse additive seed=0" in listing[1]
    assert cli(["store", "prune", "--store", str(root), "--older-than", "1d"]) == 0
    assert "removed 0 of 1 runs" in capsys.readouterr().out
    assert cli(["store", "prune", "--store", str(root), "--older-than", "0m"]) == 0
    assert "removed 1 of 1 runs" in capsys.readouterr().out


@pytest.mark.usefixtures("tiny_suite")
def test_verify_trains_stored_runs_again_and_fails_on_a_number_that_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = tmp_path / "store"
    one = [*ARGS, f"store={root}", "seeds=1", "attention=local_window"]
    assert cli(["compare", *one, "attention.window=1", f"out={tmp_path / 'first'}"]) == 0
    assert cli(["compare", *one, "attention.window=2", "verify=2", f"out={tmp_path / 'honest'}"]) == 0
    assert len(list((tmp_path / "honest" / "verify").glob("*/results.json"))) == 2
    # a stored record whose number was changed, its checksum with it: only training it again can tell
    entry = next(e for e in (root / "entries").iterdir() if '"additive"' in (e / "results.json").read_text())
    stored = read(entry / "results.json")
    stored["metrics"]["test/exact_match"] += 0.25
    (entry / "results.json").write_text(json.dumps(stored))
    meta = read(entry / "entry.json")
    meta["files"]["results.json"] = hashlib.sha256((entry / "results.json").read_bytes()).hexdigest()
    (entry / "entry.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert cli(["compare", *one, "attention.window=3", "verify=2", f"out={tmp_path / 'lied'}"]) == 1
    err = capsys.readouterr().err
    assert "verify=2: the run store's numbers differ from training them again" in err
    assert "reverse/additive/seed 0: test/exact_match stored" in err
