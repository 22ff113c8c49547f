"""The config schema (attnx/config/schema.py): a wrong type or an unknown key fails in Hydra's own merge,
and a bound the types cannot express fails before training, each as one line naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attnx.cli import main as cli


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("optim.lr=abc", "optim.lr=abc; Value 'abc' of type 'str' could not be converted to Float"),
        ("threads=two", "threads=two; Value 'two' of type 'str' could not be converted to Integer"),
        ("classifier.hiden_dim=8", "Key 'hiden_dim' not in 'ClassifierConfig'"),
        ("decode.beam=3", "Key 'beam' not in 'DecodeConfig'"),
        ("+decode.beam=3", "unknown key decode.beam; allowed: beam_size, length_penalty, max_len_ratio"),
        ("optim=sgd optim.optimizer.betas=[0.9,0.99]", "Key 'betas' not in 'SGDConfig'"),
        ("optim.scheduler=constant", "optim.scheduler=constant; Invalid type assigned"),
        ("optim.lr=-1", "optim.lr must be > 0, got -1"),
        ("optim.optimizer.weight_decay=-0.1", "optim.optimizer.weight_decay must be >= 0, got -0.1"),
        ("optim.scheduler.warmup_steps=-1", "optim.scheduler.warmup_steps must be >= 0, got -1"),
        ("decode.beam_size=0", "decode.beam_size must be >= 1, got 0"),
        ("threads=0", "threads must be >= 1, got 0"),
        ("resume=yes", "resume must be null or auto, got 'yes'"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture, override: str, expected: str
) -> None:
    assert cli(["train", *override.split(), f"hydra.run.dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


def test_a_typo_in_a_yaml_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Without the schema a misspelt key in an experiment file was merged and silently ignored."""
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "typo.yaml").write_text("# @package _global_\ndecode:\n  beam: 3\n")
    monkeypatch.setenv("ATTNX_CONFIG_PATH", str(tmp_path / "conf"))
    assert cli(["train", "experiment=typo", f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    assert "Key 'beam' not in 'DecodeConfig'" in capsys.readouterr().err


def test_storing_the_schema_imports_neither_torch_nor_lightning() -> None:
    code = (
        "import sys, attnx.config.compose\n"
        "from hydra.core.config_store import ConfigStore\n"
        "assert 'train_schema.yaml' in ConfigStore.instance().repo\n"
        "print(sorted({'torch', 'lightning'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_model_group_is_now_the_classifier_and_its_old_name_still_works(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`model` held only the classifier's head: `model.X=...` overrides are `classifier.X=...`, warned."""
    with pytest.warns(FutureWarning, match="`model` is now `classifier`: write classifier.dropout=0.3"):
        assert cli(["train", "task=sentiment", "model.dropout=0.3", "--cfg", "job"]) == 0
    assert "classifier:\n  dropout: 0.3" in capsys.readouterr().out
    with pytest.warns(FutureWarning):
        assert cli(["train", "model.dropout=1.5", f"hydra.run.dir={tmp_path}"]) == 2
    assert capsys.readouterr().err.strip() == "attnx train: classifier.dropout=1.5: must be in [0, 1)"


def test_a_config_file_s_model_section_is_the_classifier_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A user's experiment or task_defaults file written before the rename still applies, warned."""
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "old.yaml").write_text(
        "# @package _global_\nmodel:\n  dropout: 1.5\n"
    )
    monkeypatch.setenv("ATTNX_CONFIG_PATH", str(tmp_path / "conf"))
    with pytest.warns(FutureWarning, match="config section `model:` is now `classifier:`"):
        assert cli(["train", "experiment=old", f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.strip() == "attnx train: classifier.dropout=1.5: must be in [0, 1)"
