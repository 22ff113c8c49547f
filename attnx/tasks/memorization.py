"""MAD's memorization (Poli et al. 2024; athms/mad-lab `mad/data/instances.py`
`generate_memorization_instance`, `generate_kv_map`, `configs/tasks/memorization.yml`), a language-model task.

Tokens "0".."V−1": "V−1" is the insert token; of the others, keys are the lower half ⌊(V−1)/2⌋ and values
the rest. A fixed dictionary maps each key to its own value (a random one-to-one map drawn from the task's
seed alone, MAD's `generate_kv_map`). A sequence of `seq_len` tokens is ⌊seq_len/2⌋ pairs "key insert",
keys drawn uniformly with repetition; at each insert token the model must output the key's value, which
never appears in any input: the targets stand at the insert tokens (aligned with them, as MAD's: no
shift), PAD elsewhere. The rule: the answer is the dictionary's value of the key just before.

By definition the facts are the same in every split: train and test ask about the same dictionary
(what is tested is whether the weights stored it), only the sequences differ; splits never share one.
MAD's baseline (the defaults): vocab_size 256, seq_len 32, train_size 256, test_size 1,280 and batch_size
128 (MADConfig). Its changes: vocab_size 512/1,024/2,048/4,096/8,192.
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


@register_task("memorization")
class MemorizationTask(DrawnTask):
    """MAD's memorization (module docstring). Metrics: accuracy at the insert tokens (`test/acc`)."""

    model_type = "lm"
    default_attention = "multi_head"

    def __init__(
        self,
        vocab_size: int = 256,
        seq_len: int = 32,
        train_size: int = 256,  # SizedTask's and Task's arguments, with MAD's defaults
        test_size: int = 1280,
        batch_size: int = 128,
        **kwargs: Any,
    ) -> None:
        super().__init__(train_size=train_size, test_size=test_size, batch_size=batch_size, **kwargs)
        check("vocab_size", vocab_size, vocab_size >= 3, ">= 3 (a key, a value and the insert token)")
        check("seq_len", seq_len, seq_len >= 2, ">= 2 (a key and the insert token)")
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.keys = (vocab_size - 1) // 2
        needed = sum(self.sizes.values())
        check(
            "seq_len",
            seq_len,
            self.keys ** (seq_len // 2) >= 2 * needed,
            f"large enough that {self.keys} keys make twice the {needed} distinct sequences the splits need",
        )
        self.src_vocab = Vocab(str(t) for t in range(vocab_size))
        # facts[k]: key k's value, distinct values for distinct keys
        values = torch.randperm(vocab_size - 1 - self.keys, generator=self.generator("facts"))
        self.facts = self.keys + values[: self.keys]

    def sample(self, n: int, split: str, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """`n` sequences: (token ids [n, 2⌊seq_len/2⌋], targets [n, 2⌊seq_len/2⌋], PAD where none)."""
        keys = torch.randint(0, self.keys, (n, self.seq_len // 2), generator=generator)
        insert = torch.full_like(keys, self.vocab_size - 1)
        tokens = torch.stack([keys, insert], 2).flatten(1) + _FIRST_SYMBOL
        targets = torch.stack([torch.full_like(keys, PAD), self.facts[keys] + _FIRST_SYMBOL], 2).flatten(1)
        return tokens, targets

    def query_mask(self, src: Tensor) -> Tensor:
        """[B, T] bool: the insert tokens (`attnx predict`)."""
        return src == _FIRST_SYMBOL + self.vocab_size - 1
