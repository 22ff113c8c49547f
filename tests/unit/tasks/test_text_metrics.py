"""Text metrics: sacreBLEU's numbers, multi-reference PER/WER, and raw references through TextTask."""

from __future__ import annotations

import pytest
import torch

from attnx.tasks.metrics import SequenceErrorRate, TokenErrorRate, bleu, chrf, edit_distance
from attnx.tasks.text import TextTask

HYPOTHESES = ["the cat sat on the mat .", "a quick brown fox jumps", "hello world"]
REFERENCES = [
    ["the cat is on the mat .", "there is a cat on the mat ."],
    ["the quick brown fox jumps over", "a fast brown fox leaps"],
    ["hello , world !", "hello world !"],
]


def test_bleu_and_chrf_equal_sacrebleu() -> None:
    # Computed with sacrebleu 2.6.0: corpus_bleu(...).score and CHRF(eps_smoothing=True); both 0-100.
    assert float(bleu()(HYPOTHESES, REFERENCES)) * 100 == pytest.approx(53.92862006141555, abs=1e-4)
    assert float(chrf()(HYPOTHESES, REFERENCES)) * 100 == pytest.approx(74.00807237078747, abs=1e-4)
    single = [[refs[0]] for refs in REFERENCES]
    assert float(bleu()(HYPOTHESES, single)) * 100 == pytest.approx(44.31887477662985, abs=1e-4)
    assert float(chrf()(HYPOTHESES, single)) * 100 == pytest.approx(66.63688570014016, abs=1e-4)


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("", "", 0),
        ("abc", "", 3),
        ("", "ab", 2),
        ("kitten", "sitting", 3),
        ("flaw", "lawn", 2),
        ("ab", "ba", 2),
    ],
)
def test_edit_distance(a: str, b: str, distance: int) -> None:
    assert edit_distance(list(a), list(b)) == distance == edit_distance(list(b), list(a))


def test_phoneme_error_rate_uses_the_closest_reference() -> None:
    per = TokenErrorRate()
    # "K AH N T R AE K T" is 1 edit from the second pronunciation, 2 from the first.
    per.update(["K AH N T R AE K T"], [["K AA N T R AE K T S", "K AH N T R AE K"]])
    per.update(["R EH D"], [["R IY D", "R EH D"]])  # exact on the second: 0 edits of 3
    assert float(per.compute()) == pytest.approx(1 / (7 + 3))
    tie = TokenErrorRate()
    tie.update(["A B"], [["A", "A B C"]])  # 1 edit from each: the longer reference gives the lower rate
    assert float(tie.compute()) == pytest.approx(1 / 3)


def test_word_error_rate_accepts_any_reference() -> None:
    wer = SequenceErrorRate()
    wer.update(["R EH D", "R EH D", "T UW"], [["R IY D", "R EH D"], ["R IY D"], ["T UW", "T AH"]])
    assert float(wer.compute()) == pytest.approx(1 / 3)
    wer.reset()
    with pytest.warns(UserWarning, match="``compute`` method of metric SequenceErrorRate was called before"):
        assert float(wer.compute()) == 0.0  # no division by zero before any update: torchmetrics warns


class Pairs(TextTask):
    model_type = "seq2seq"

    def examples(self) -> dict[str, list[tuple[str, str]]]:
        return {"train": [("a b", "x y")], "val": [("a", "x zebra")], "test": [("b", "y")]}


def test_references_keep_words_the_vocabulary_lacks() -> None:
    """A val target word unseen in train becomes UNK in the ids but not in the reference text,
    so an output of "<unk>" can never match it."""
    task = Pairs()
    task.setup()
    assert task.tgt_vocab.decode(task.splits["val"].tgt[0, 1:].tolist()) == ["x", "<unk>"]
    assert task.references("val", torch.tensor([0])) == [["x zebra"]]
    batch = next(iter(task.dataloader("val")))
    assert batch.index.tolist() == [0]
