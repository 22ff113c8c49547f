"""H3's in-context-learning synthetics (Fu, Dao et al. 2023, "Hungry Hungry Hippos"): induction
head and associative recall, language-modelling tasks whose one target is the last token.

Over `vocab_size` tokens, as H3's (HazyResearch/safari, `src/dataloaders/synthetics.py`): S =
vocab_size − 2 ordinary tokens "0".."S−1", then H3's two special tokens, the copy prefix `=>` and the
no-op `.`, which only H3's `allow_dot` variant writes (off in its configs, and not reproduced), so it is
counted but never drawn. Each sequence is a prompt of L = `seq_len` tokens (H3's `input_seq_len`), a
query that starts with `=>`, and the answer a, the token to predict next:

- induction head: x₀..x_{L−1} uniform over the S ordinary tokens; one position p, uniform in
  [0, L − 3], becomes `=>`; the sequence is x₀..x_{L−1} `=>` a with a = x_{p+1}, the token that followed
  the copy prefix (H3's `induction_len` = 1 and one trigger, its configs' settings).
- associative recall: keys are the first ⌊S/2⌋ ordinary tokens, values the rest; each key gets a value
  uniformly (values may repeat), then L/2 keys k_i are drawn uniformly with replacement and the prompt
  is k₁ v(k₁) … k_{L/2} v(k_{L/2}); the query q is uniform over the distinct keys present (H3's
  `allow_dot` = False), and the sequence is the prompt `=>` q a with a = v(q) (`num_keys` = 1).

The model reads the sequence without its answer a; the target at the last position is a and PAD
elsewhere, so `LMModule`'s accuracy is H3's `accuracy_ignore_index` on its test split, the answer only.
H3 also trains on every next token; here training sees the answer only. Defaults are H3's configs:
`configs/dataset/icl_synthetics.yaml` (5000 training and 500 test examples; associative recall's
vocab_size 20 and input_seq_len 40), `configs/pipeline/induction_head.yaml` (vocab_size 20,
input_seq_len 30) and `configs/experiment/synthetics/*/base.yaml` (batch size 32); its other configs
vary vocab_size (10, 30) and input_seq_len. Splits come from the seed alone and never share a sequence
(H3 validates on its test split and removes repeats only within a split); `test_seq_len` lengthens the
test prompts (H3's `test_seq_len`), `val_like_test` draws val like test.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnx.registry import register_task
from attnx.tasks.base import check
from attnx.tasks.drawn import DrawnTask
from attnx.vocab import PAD, SPECIALS, Vocab

_FIRST_SYMBOL = len(SPECIALS)  # ordinary token t has id _FIRST_SYMBOL + t; `=>` comes after them
COPY_PREFIX = "=>"
_RESERVED = 2  # H3's vocab_size counts `=>` and the no-op `.`


class ICLSynthetic(DrawnTask):
    """A prompt, a query that starts with `=>`, and the answer as the last position's only target (`lm`
    model kind).
    Subclasses give `check_seq_len` and `draw`; H3's vocabulary size and split sizes are here."""

    model_type = "lm"
    default_attention = "multi_head"  # softmax attention, H3's reference that solves both tasks

    def __init__(
        self,
        seq_len: int,
        vocab_size: int = 20,
        test_seq_len: int | None = None,
        val_like_test: bool = False,
        train_size: int = 5000,  # SizedTask's and Task's arguments, with H3's defaults
        val_size: int = 500,
        test_size: int = 500,
        batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            train_size=train_size, val_size=val_size, test_size=test_size, batch_size=batch_size, **kwargs
        )
        check("vocab_size", vocab_size, vocab_size >= _RESERVED + 2, ">= 4 (H3's `=>` and `.`, and 2 tokens)")
        test_seq_len = seq_len if test_seq_len is None else test_seq_len
        self.check_seq_len("seq_len", seq_len)
        self.check_seq_len("test_seq_len", test_seq_len)
        self.symbols = vocab_size - _RESERVED
        val_len = test_seq_len if val_like_test else seq_len
        self.lengths = {"train": seq_len, "val": val_len, "test": test_seq_len}
        self.src_vocab = Vocab([*(str(t) for t in range(self.symbols)), COPY_PREFIX])

    def check_seq_len(self, field: str, value: int) -> None:
        """Refuse (`check`) a prompt length the generator cannot fill."""
        raise NotImplementedError

    def draw(self, n: int, seq_len: int, generator: torch.Generator) -> Tensor:
        """[n, T] symbol indices (ordinary tokens 0..S−1, `=>` = S): the prompt, the query, the answer."""
        raise NotImplementedError

    def sample(self, n: int, split: str, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return answer_last(self.draw(n, self.lengths[split], generator))

    def query_mask(self, src: Tensor) -> Tensor:
        """[B, T] bool: each raw sequence's last token, the query whose next token is the answer."""
        last = (src != PAD).sum(1, keepdim=True) - 1
        return torch.arange(src.shape[1]) == last


def answer_last(symbols: Tensor) -> tuple[Tensor, Tensor]:
    """(token ids without the answer, targets: the answer at the last position, PAD elsewhere)."""
    ids = symbols + _FIRST_SYMBOL
    src = ids[:, :-1]
    tgt = torch.full_like(src, PAD)
    tgt[:, -1] = ids[:, -1]
    return src, tgt


@register_task("induction_head")
class InductionHeadTask(ICLSynthetic):
    """H3's induction head: after the final `=>`, recall the token that followed the `=>` in the prompt.
    Chance is 1 / (vocab_size − 2)."""

    def __init__(self, seq_len: int = 30, **kwargs: Any) -> None:
        super().__init__(seq_len=seq_len, **kwargs)

    def check_seq_len(self, field: str, value: int) -> None:
        check(field, value, value >= 3, ">= 3 (the `=>` and its token before the prompt's last token)")

    def draw(self, n: int, seq_len: int, generator: torch.Generator) -> Tensor:
        rows = torch.arange(n)
        symbols = torch.randint(0, self.symbols, (n, seq_len + 2), generator=generator)
        trigger = torch.randint(0, seq_len - 2, (n,), generator=generator)
        symbols[rows, trigger] = symbols[:, seq_len] = self.symbols
        symbols[:, seq_len + 1] = symbols[rows, trigger + 1]
        return symbols


@register_task("associative_recall")
class AssociativeRecallTask(ICLSynthetic):
    """H3's associative recall: after `=>` and a key, recall the value that key had in the prompt's
    pairs. A guess among the values is right with probability 1 / (vocab_size − 2 − ⌊(vocab_size − 2)/2⌋)."""

    def __init__(self, seq_len: int = 40, **kwargs: Any) -> None:
        super().__init__(seq_len=seq_len, **kwargs)

    def check_seq_len(self, field: str, value: int) -> None:
        check(field, value, value >= 2 and value % 2 == 0, "an even number >= 2 (key-value pairs)")

    def draw(self, n: int, seq_len: int, generator: torch.Generator) -> Tensor:
        num_keys, pairs = self.symbols // 2, seq_len // 2
        value_of = num_keys + torch.randint(0, self.symbols - num_keys, (n, num_keys), generator=generator)
        keys = torch.randint(0, num_keys, (n, pairs), generator=generator)
        present = torch.zeros(n, num_keys).scatter_(1, keys, 1.0)
        query = torch.multinomial(present, 1, generator=generator)  # uniform over the distinct keys present
        prefix = torch.full((n, 1), self.symbols)
        prompt = torch.stack([keys, value_of.gather(1, keys)], 2).flatten(1)
        return torch.cat([prompt, prefix, query, value_of.gather(1, query)], 1)
