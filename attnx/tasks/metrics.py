"""Metrics of decoded text: each is updated with (hypotheses: list[str], references: list[list[str]]).

That is the signature of torchmetrics' BLEU and chrF, with every acceptable reference of an
example in its list; a task declares which it reports in `Task.text_metrics()`. Scores are on
torchmetrics' 0-1 scale (sacreBLEU prints 100x). The error rates compare whitespace-separated
tokens, so "DH AH0" is two phonemes and "the cat" two words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchmetrics import Metric
from torchmetrics.text import CHRFScore, SacreBLEUScore


def bleu() -> Metric:
    """Corpus BLEU as sacreBLEU computes it by default (13a tokenisation, 4-grams, no smoothing)."""
    return SacreBLEUScore(tokenize="13a")


def chrf() -> Metric:
    """chrF (Popović 2015): character 6-grams, β = 2; word 2-grams would make it chrF++.

    torchmetrics averages the F-score over n-gram orders, which is sacreBLEU's
    `CHRF(eps_smoothing=True)` (chrF++.py's definition) to float precision; sacreBLEU's default
    averages precision and recall first and differs by hundredths of a point.
    """
    return CHRFScore(n_char_order=6, n_word_order=0, beta=2.0)


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two token sequences (unit-cost insertions, deletions, substitutions)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


class ErrorRate(Metric):
    """Σ errors / Σ the units they are counted over, summed over examples (and DDP ranks): each subclass
    says what an example's errors and units are (`count`)."""

    full_state_update = False
    higher_is_better = False
    plot_lower_bound = 0.0  # its best value: no errors (attnx reads it as the metric's ceiling)
    plot_upper_bound = 1.0
    errors: torch.Tensor  # states, made by add_state
    total: torch.Tensor

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("errors", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def count(self, tokens: list[str], references: list[list[str]]) -> tuple[float, float]:
        """(errors, units) of one output, as tokens, against its references' tokens."""
        raise NotImplementedError

    def update(self, hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> None:
        for hypothesis, refs in zip(hypotheses, references, strict=True):
            errors, units = self.count(hypothesis.split(), [r.split() for r in refs])
            self.errors += errors
            self.total += units

    def compute(self) -> torch.Tensor:
        return (self.errors / self.total.clamp(min=1)).float()


class TokenErrorRate(ErrorRate):
    """Σ edits to the closest reference / Σ that reference's length: the phoneme error rate (PER) of
    grapheme-to-phoneme work when tokens are phonemes (Bisani & Ney 2008)."""

    def count(self, tokens: list[str], references: list[list[str]]) -> tuple[float, float]:
        scored = [(edit_distance(tokens, r), len(r)) for r in references]
        edits, length = min(scored, key=lambda s: (s[0], -s[1]))  # ties: the longer, lower-rate reference
        return edits, length


class SequenceErrorRate(ErrorRate):
    """The fraction of outputs equal to none of their references: grapheme-to-phoneme's word error rate
    (WER), where a word is right if its output is any of the word's pronunciations."""

    def count(self, tokens: list[str], references: list[list[str]]) -> tuple[float, float]:
        return float(all(tokens != r for r in references)), 1.0
