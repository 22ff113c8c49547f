"""`attnx generate` on a tiny trained lm: the cached continuation equals the full forward pass's argmax,
sampling is reproducible, and bad input is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnx.cli import main as cli
from attnx.generate import symbol_logits
from attnx.predict import load
from attnx.tasks.mqar import MQARTask

from helpers.tiny import TINY_BUDGET, TINY_LM, completed

CHECKPOINTS = Path(__file__).parents[2] / "data" / "checkpoints"
# SwiGLU MLPs and a short convolution before each mechanism (MAD's MLPs, Zoology's convolution)
SWIGLU_CONV = ["lm.ff=swiglu", "lm.ff_dim=32", "lm.conv=3"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lm")
    record = completed(folder, *TINY_LM, *SWIGLU_CONV, *TINY_BUDGET)
    assert record["config"]["lm"]["ff"] == "swiglu" and record["config"]["lm"]["conv"] == 3
    return folder


def prompt(length: int = 11) -> str:
    """The start of an MQAR sequence of the run's task: its 2 pairs and a query among the filler."""
    task = MQARTask(vocab_size=16, seq_len=16, num_kv_pairs=2, train_size=1, val_size=1, test_size=1, seed=3)
    task.setup()
    return " ".join(task.src_vocab.itos[i] for i in task.splits["train"].src[0, :length].tolist())


def generated(capsys: pytest.CaptureFixture, *argv: str) -> list[str]:
    capsys.readouterr()
    assert cli(["generate", *argv]) == 0, capsys.readouterr().err
    return capsys.readouterr().out.splitlines()


def test_greedy_continues_as_the_full_forward_passes_argmax_and_shows_the_answers(
    run: Path, capsys: pytest.CaptureFixture
) -> None:
    out = generated(capsys, str(run), prompt(), "--max-new-tokens", "5")
    assert out[0] == f"prompt:       {prompt()}"
    continuation = out[1].removeprefix("continuation: ").split()
    model = load(str(next(run.rglob("*.ckpt")))).model
    itos = load(str(next(run.rglob("*.ckpt")))).spec.src_itos
    tokens = torch.tensor([[itos.index(t) for t in prompt().split()]])
    with torch.no_grad():
        for _ in range(5):
            logits, _ = model(tokens, torch.tensor([tokens.size(1)]))
            tokens = torch.cat([tokens, symbol_logits(logits[:, -1:]).argmax(-1)], dim=1)
    assert continuation == [itos[i] for i in tokens[0, 11:].tolist()]
    assert out[2] == "position  query -> answer"  # mqar: the model's answer at each query
    assert len(out) > 3 and all("->" in line for line in out[3:])
    assert generated(capsys, str(run), prompt(), "--max-new-tokens", "5") == out  # deterministic


def test_sampling_with_a_seed_is_reproducible_from_the_checkpoint_too(
    run: Path, capsys: pytest.CaptureFixture
) -> None:
    ckpt = str(next(run.rglob("*.ckpt")))
    sampled = ["--max-new-tokens", "5", "--temperature", "1.5", "--top-k", "4", "--seed", "7"]
    assert generated(capsys, str(run), prompt(), *sampled) == generated(capsys, ckpt, prompt(), *sampled)
    # a checkpoint written before lm.ff and lm.conv existed decodes with their defaults
    old = generated(capsys, str(CHECKPOINTS / "lm.ckpt"), prompt(), "--max-new-tokens", "3")
    assert len(old[1].removeprefix("continuation: ").split()) == 3


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["{missing}", "a"], "no such run folder or checkpoint"),
        (["{seq2seq}", "a b"], "a seq2seq model, which does not continue a sequence token by token"),
        (["{run}", "{first} zzz"], "prompt tokens unknown to the model: zzz"),
        (["{run}", "{prompt}", "--temperature", "-1"], "--temperature=-1.0: must be >= 0"),
        (["{run}", "{prompt}", "--temperature", "1", "--top-k", "0"], "--top-k=0: must be >= 1"),
        (["{run}", "{prompt}", "--max-new-tokens", "600"], "need 610 positions, more than lm.max_len=512"),
        (["{run}", "{prompt}", "--max-new-tokens", "many"], "argument --max-new-tokens: invalid int value"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    run: Path, capsys: pytest.CaptureFixture, argv: list[str], expected: str
) -> None:
    where = {
        "missing": run / "nothing",
        "seq2seq": CHECKPOINTS / "seq2seq.ckpt",
        "run": run,
        "prompt": prompt(),
        "first": prompt().split()[0],
    }
    capsys.readouterr()
    try:
        code = cli(["generate", *(a.format(**where) for a in argv)])
    except SystemExit as exit:  # argparse's own errors (cli.ArgumentParser: one line)
        code = exit.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and expected in err, err
    assert err.startswith("attnx generate: ")
