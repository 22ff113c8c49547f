"""MAD's selective copying (Poli et al. 2024, after Gu & Dao 2023's selective copying; athms/mad-lab
`mad/data/instances.py` `generate_copying_instance(selective=True)`, `configs/tasks/selective-copying.yml`),
a language-model task.

Tokens "0".."V−1": "V−1" is the copy token, "V−2" the blank, the rest content. A sequence of `seq_len`
tokens holds `num_tokens_to_copy` = n content tokens (uniform, with repetition) at random places among
the first seq_len − n − 1 positions, blanks everywhere else there, then the copy token, then n blanks.
At the i-th blank after the copy token the model must output the i-th content token: the targets stand
at those n positions (aligned with the tokens, as MAD's: no shift), PAD elsewhere, so training and
accuracy count only them. The rule: the answers are the non-blank tokens before the copy token, in order.

MAD's baseline (the defaults): vocab_size 16, seq_len 256, num_tokens_to_copy 16, train_size 12,800,
test_size 1,280 and batch_size 128 (MADConfig). Its changes: vocab_size 32/64/128, seq_len 512/1024,
num_tokens_to_copy 32/64/96, train_size 6,400/3,200/1,600/800. MAD inserts its blanks with NumPy's global
generator before random content tokens (never after the last one); here the content positions are a
uniform random subset drawn from the task's own generator. Splits never share a sequence.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnx.registry import register_task
from attnx.tasks.base import check
from attnx.tasks.drawn import DrawnTask
from attnx.vocab import PAD, SPECIALS, Vocab

_FIRST_SYMBOL = len(SPECIALS)  # token t has id _FIRST_SYMBOL + t


@register_task("selective_copying")
class SelectiveCopyingTask(DrawnTask):
    """MAD's selective copying (module docstring). Metrics: accuracy at the n answers (`test/acc`)."""

    model_type = "lm"
    default_attention = "multi_head"

    def __init__(
        self,
        vocab_size: int = 16,
        seq_len: int = 256,
        num_tokens_to_copy: int = 16,
        train_size: int = 12800,  # SizedTask's and Task's arguments, with MAD's defaults
        test_size: int = 1280,
        batch_size: int = 128,
        **kwargs: Any,
    ) -> None:
        super().__init__(train_size=train_size, test_size=test_size, batch_size=batch_size, **kwargs)
        check("vocab_size", vocab_size, vocab_size >= 3, ">= 3 (a content token, the blank, the copy token)")
        check("num_tokens_to_copy", num_tokens_to_copy, num_tokens_to_copy >= 1, ">= 1")
        check(
            "num_tokens_to_copy",
            num_tokens_to_copy,
            2 * num_tokens_to_copy + 1 < seq_len,
            f"< (seq_len - 1) / 2 = {(seq_len - 1) / 2:g} (MAD's seq_len > 2 * num_tokens_to_copy + 1: "
            "the tokens, a blank at least, the copy token and a blank per answer)",
        )
        self.vocab_size, self.seq_len, self.count = vocab_size, seq_len, num_tokens_to_copy
        self.src_vocab = Vocab(str(t) for t in range(vocab_size))

    @property
    def blank(self) -> int:
        return _FIRST_SYMBOL + self.vocab_size - 2

    def sample(self, n: int, split: str, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """`n` sequences: (token ids [n, seq_len], targets [n, seq_len], PAD where none)."""
        count, region = self.count, self.seq_len - self.count - 1
        content = _FIRST_SYMBOL + torch.randint(0, self.vocab_size - 2, (n, count), generator=generator)
        places = torch.rand(n, region, generator=generator).argsort(1)[:, :count].sort(1).values
        tokens = torch.full((n, self.seq_len), self.blank)
        tokens.scatter_(1, places, content)
        tokens[:, region] = self.blank + 1  # the copy token
        targets = torch.full_like(tokens, PAD)
        targets[:, region + 1 :] = content
        return tokens, targets

    def query_mask(self, src: Tensor) -> Tensor:
        """[B, T] bool: the positions after the copy token (`attnx predict`)."""
        return (src == self.blank + 1).int().cumsum(1).bool() & (src != self.blank + 1)
