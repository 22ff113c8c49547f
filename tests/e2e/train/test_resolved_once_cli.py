"""A run's configuration is resolved once: from the moment a job's task function has its composed config,
validation is entered once and returns the `ResolvedRun` every later step reads; each config section is
converted to plain data once; the attention sites are resolved once; a checkpoint to resume from is read
and verified once, not again by Lightning."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

from attnx.lit import checkpoints
from attnx.train import run as run_module

from helpers.tiny import TINY, TINY_LM, TINY_SELF_ATTN, TINY_TRANSFORMER, train

RESOLVING = ("attnx.config.validation", "attnx.config.compose", "attnx.config.lightning")


class Tally:
    """While a run's `_run` runs: each conversion of a config node to plain data by attnx's code (by the
    node's key; the root stands for every section), each entry into a module that resolves configuration
    (`RESOLVING`) from a module outside the config package, and each resolution of the attention sites
    (`models.sites.resolve_sites`; their accessors, `Sites.attention` and the like, are reads)."""

    def __init__(self) -> None:
        self.converted: Counter[str] = Counter()
        self.entered: Counter[str] = Counter()
        self.running = False  # inside `_run`: the CLI's own preflight before the job is not the run

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or frame.f_back is None:
            return
        callee, caller = frame.f_globals.get("__name__", ""), frame.f_back.f_globals.get("__name__", "")
        if callee in RESOLVING and callee != caller and not caller.startswith("attnx.config."):
            self.entered[callee] += 1
        elif callee == "attnx.models.sites" and frame.f_code.co_name == "resolve_sites":
            self.entered["resolve_sites"] += 1


@pytest.fixture
def tally(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tally]:
    found = Tally()
    convert = OmegaConf.to_container

    def converted(cfg: Any, *args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if found.running and caller.startswith("attnx.") and isinstance(cfg, DictConfig):
            found.converted[cfg._get_full_key(None) or "<root>"] += 1
        return convert(cfg, *args, **kwargs)

    original = run_module._run

    def traced(*args: Any, **kwargs: Any) -> Any:
        found.running = True
        sys.setprofile(found.profile)
        try:
            return original(*args, **kwargs)
        finally:
            sys.setprofile(None)
            found.running = False

    monkeypatch.setattr(OmegaConf, "to_container", staticmethod(converted))
    monkeypatch.setattr(run_module, "_run", traced)
    yield found


SECTIONS = (
    "task",
    "attention",
    "score",
    "encoder",
    "decoder",
    "lm",
    "classifier",
    "optim",
    "decode",
    "convergence",
)


@pytest.mark.parametrize(
    "overrides",
    [
        [*TINY_SELF_ATTN, *TINY_TRANSFORMER, *TINY[2:]],
        [*TINY_LM, *TINY[2:]],
        ["task=sentiment", "encoder.hidden_dim=8", *TINY[2:]],
    ],
    ids=["seq2seq", "lm", "classification"],
)
def test_validation_is_entered_once_and_each_section_converted_once(
    overrides: list[str], tally: Tally, tmp_path: Path
) -> None:
    assert train(tmp_path, *overrides) == 0
    assert tally.entered == {"attnx.config.validation": 1, "resolve_sites": 1}, tally.entered
    assert "<root>" not in tally.converted, tally.converted  # the whole config is never converted again
    assert all(tally.converted[section] == 1 for section in SECTIONS if section != "score"), tally.converted
    twice = {key: n for key, n in tally.converted.items() if n > 1}
    assert not twice, twice


def test_a_checkpoint_to_resume_from_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = tmp_path / "first"
    assert train(first, *TINY) == 0
    last = first / "checkpoints" / "last.ckpt"
    reads: Counter[str] = Counter()
    load = checkpoints.load

    def counted(path: Any) -> Any:
        reads[str(path)] += 1
        return load(path)

    monkeypatch.setattr(checkpoints, "load", counted)
    assert train(tmp_path / "second", *TINY, "trainer.max_epochs=2", f"ckpt_path={last}", "test=false") == 0
    assert reads[str(last)] == 1, reads
