"""Continuation, end to end: a finished run launched again in its folder with a longer budget goes on from its
checkpoint and ends exactly as one run of the longer budget does, also when the shorter run came from the run
store into another folder (its checkpoints' callback states written elsewhere), and the continued run is
stored under the longer budget's key, where a third run takes it."""

from __future__ import annotations

from pathlib import Path

from attnx.store.runs import Store

from helpers.tiny import NO_HEATMAPS, TINY_MODEL, TINY_RNN, results, sizes, train

# validated twice an epoch, so the best checkpoint is chosen among several and a lost best score would show
RUN = [
    *TINY_RNN,
    *TINY_MODEL,
    *sizes(train=64),
    *NO_HEATMAPS,
    "attention=additive",
    "optim/scheduler=constant",
    "optim.scheduler.warmup_steps=2",
    "trainer.val_check_interval=0.5",
    "optim.lr=0.05",
]


def record(folder: Path) -> dict:
    (found,) = results(folder)
    return found


def names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def test_a_continued_run_is_the_longer_run_and_is_stored_as_it(tmp_path: Path) -> None:
    store = f"store={tmp_path / 'store'}"
    short, long = "trainer.max_epochs=3", "trainer.max_epochs=8"
    assert train(tmp_path / "trained", *RUN, short, store) == 0
    assert train(tmp_path / "moved", *RUN, short, store) == 0  # from the store, into another folder
    assert record(tmp_path / "moved")["stored"]["from"] == str(tmp_path / "trained")
    assert train(tmp_path / "moved", *RUN, long, store, "resume=auto") == 0  # continued there
    assert train(tmp_path / "straight", *RUN, long, "store=null") == 0
    continued, straight = record(tmp_path / "moved"), record(tmp_path / "straight")
    assert continued["resumed_from"] and not straight["resumed_from"]
    assert "stored" not in continued  # trained on from the stored run's checkpoint, not taken whole
    assert continued["metrics"] == straight["metrics"]
    assert (continued["epochs"], continued["steps"]) == (straight["epochs"], straight["steps"]) == (8, 32)
    assert Path(continued["checkpoint"]).name == Path(straight["checkpoint"]).name  # the same best
    # the checkpoint callback took its state back though written in another folder: it replaced the shorter
    # run's best and last instead of keeping them beside new ones
    assert names(tmp_path / "moved" / "checkpoints") == names(tmp_path / "straight" / "checkpoints")
    assert continued["train_seconds"] > record(tmp_path / "trained")["train_seconds"]  # both stretches
    assert len(Store(tmp_path / "store").entries()) == 2  # the 2-epoch run and the 4-epoch one
    assert train(tmp_path / "third", *RUN, long, store) == 0
    third = record(tmp_path / "third")
    assert third["stored"]["from"] == str(tmp_path / "moved") and third["metrics"] == straight["metrics"]


def test_a_run_resumed_from_other_overrides_is_not_stored(tmp_path: Path) -> None:
    store = f"store={tmp_path / 'store'}"
    assert train(tmp_path / "run", *RUN, "trainer.max_epochs=1", "store=null") == 0
    # another learning rate in the same folder: resume=auto goes on from the other run's checkpoint, which
    # is no run of this key
    assert train(tmp_path / "run", *RUN, "trainer.max_epochs=2", "optim.lr=0.01", store, "resume=auto") == 0
    assert record(tmp_path / "run")["resumed_from"]
    assert Store(tmp_path / "store").entries() == []
