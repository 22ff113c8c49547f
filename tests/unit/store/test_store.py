"""The run store (attnx.store): a run's key changes with what changes its numbers and with nothing else; an
entry comes back whole, with its record moved to the new folder, or not at all; one process at a time holds
a key."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from attnx.config.compose import compose
from attnx.config.resolved import UNRESULTED
from attnx.store.key import run_key
from attnx.store.runs import Store, root_of

from helpers.plugins import imported

RUN = ["task=reverse", "attention=additive", "encoder.hidden_dim=16"]


def key(*overrides: str) -> str:
    return run_key(compose([*RUN, *overrides])).hex


@pytest.mark.slow  # Hydra compositions
def test_the_key_changes_with_a_hyperparameter_the_seed_and_threads_not_with_paths_or_loggers() -> None:
    base = compose(RUN)
    same = run_key(base).hex
    assert run_key(compose(RUN)).hex == same  # composed again
    for dotted, value in [
        *(
            ("encoder.hidden_dim", 32),
            ("seed", 1),
            ("threads", 2),
            ("optim.lr", 0.01),
            ("attention.name", "dot"),
            ("ckpt_path", "/x.ckpt"),  # a run started from another checkpoint is another run
        ),
        *(
            ("logger", {"tensorboard": {}}),
            ("resume", "auto"),
            ("compile_cache", "/x"),
            ("store", "/elsewhere"),
        ),
        ("paths.output_dir", "/elsewhere"),
    ]:
        cfg = copy.deepcopy(base)
        OmegaConf.update(cfg, dotted, value, force_add=True)
        changes = dotted.split(".")[0] not in UNRESULTED
        assert (run_key(cfg).hex != same) == changes, dotted


@pytest.mark.slow  # Hydra compositions
def test_the_key_holds_the_plugin_files_source_and_the_datas_files(
    tmp_path: Path, isolated_registries: None
) -> None:
    plugin = tmp_path / "my_score.py"
    plugin.write_text(
        "from attnx.nn.scores import DotScore\nfrom attnx.registry import register_score\n\n"
        "@register_score('store_probe')\nclass StoreProbe(DotScore):\n    pass\n"
    )
    imported(plugin)
    before = key("attention=dot", "score=store_probe")
    assert key("attention=dot") != before
    plugin.write_text(plugin.read_text() + "# an edit that may change its numbers\n")
    assert key("attention=dot", "score=store_probe") != before  # the file read again
    assert key("attention=dot") == key("attention=dot")  # other runs keep theirs
    data = tmp_path / "pairs.tsv"
    data.write_text("a b\tb a\n")
    text = ["task=text_pairs", f"task.train_file={data}", f"task.val_file={data}", f"task.test_file={data}"]
    first = run_key(compose(text)).hex
    data.write_text("a b\tb a\nc d\td c\n")
    assert run_key(compose(text)).hex != first


@pytest.mark.slow  # a Hydra composition
def test_the_key_holds_the_files_of_the_plugins_an_lm_plan_chooses(
    tmp_path: Path, isolated_registries: None
) -> None:
    plugin = tmp_path / "my_mechanism.py"
    plugin.write_text(
        "from attnx.nn.multihead import MultiHeadAttention\nfrom attnx.registry import register_attention\n\n"
        "@register_attention('store_probe_mechanism')\nclass StoreProbe(MultiHeadAttention):\n    pass\n"
    )
    imported(plugin)
    plan = ["task=mqar", "lm.layers=[{name:multi_head},{name:store_probe_mechanism}]"]
    assert str(plugin.resolve()) in run_key(compose(plan)).parts["plugins"]
    assert run_key(compose(["task=mqar"])).parts["plugins"] == {}


def finished(folder: Path) -> Path:
    """A completed run folder as `attnx train` leaves one: its record, a checkpoint, its lock."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (folder / "run.lock").write_text("")
    record = {
        "status": "completed",
        "output_dir": str(folder),
        "overrides": ["seed=0", f"compile_cache={folder}/cc"],
        "checkpoint": str(folder / "checkpoints" / "last.ckpt"),
        "metrics": {"test/acc": 0.5},
    }
    (folder / "results.json").write_text(json.dumps(record))
    return folder


def test_a_stored_run_comes_back_in_another_folder_saying_where_from(tmp_path: Path) -> None:
    store, k = Store(tmp_path / "store"), run_key(compose(RUN))
    first = finished(tmp_path / "first")
    store.put(k, first)
    again = tmp_path / "again"
    again.mkdir()
    record = store.fetch(k, again, ["seed=0"])
    assert record is not None and record["metrics"] == {"test/acc": 0.5}
    assert record["output_dir"] == str(again) and record["checkpoint"] == str(again / "checkpoints/last.ckpt")
    assert record["overrides"] == ["seed=0"]  # this job's, which resume=auto compares
    assert record["stored"]["key"] == k.hex and record["stored"]["from"] == str(first)
    assert (again / "checkpoints" / "last.ckpt").read_bytes() == b"weights"
    assert json.loads((again / "results.json").read_text()) == record
    assert not (store.root / "entries" / k.hex / "run.lock").exists()  # no part of the result
    (listed,) = store.entries()
    assert listed.key == k.hex and listed.size > 0


def test_a_corrupt_or_partial_entry_is_removed_and_not_used(tmp_path: Path) -> None:
    store, k = Store(tmp_path / "store"), run_key(compose(RUN))
    store.put(k, finished(tmp_path / "first"))
    entry = store.root / "entries" / k.hex
    (entry / "checkpoints" / "last.ckpt").write_bytes(b"weightz")  # one byte flipped
    assert store.fetch(k, tmp_path / "again", []) is None
    assert not entry.exists() and store.entries() == []
    store.put(k, finished(tmp_path / "second"))
    (entry / "entry.json").unlink()  # cut short before its manifest
    assert store.fetch(k, tmp_path / "third", []) is None and not entry.exists()


def test_an_unfinished_run_is_not_stored(tmp_path: Path) -> None:
    store, k = Store(tmp_path / "store"), run_key(compose(RUN))
    folder = finished(tmp_path / "run")
    record = json.loads((folder / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps({**record, "status": "failed"}))
    store.put(k, folder)
    assert store.entries() == []


def test_a_second_claim_of_a_key_waits_for_the_first(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    k = run_key(compose(RUN))
    order: list[str] = []

    def second() -> None:
        with store.claim(k):
            order.append("second")

    with store.claim(k):
        waiting = threading.Thread(target=second)
        waiting.start()
        time.sleep(0.3)
        order.append("first done")
    waiting.join(10)
    assert order == ["first done", "second"]


def test_store_auto_is_the_users_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert root_of("auto") == tmp_path / "attnx" / "runs"
    assert root_of(None) is None and root_of(str(tmp_path / "x")) == tmp_path / "x"
