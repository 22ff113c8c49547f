"""MAD's compression (Poli et al. 2024; athms/mad-lab `mad/data/instances.py` `generate_compression_instance`,
`mad/model/auto_encoder.py`, `configs/tasks/compression.yml`) as a seq2seq task.

Tokens "0".."V−1": "V−1" is the compression token. A source is `seq_len` − 1 tokens drawn uniformly from
the others, then the compression token; the target is the source itself. MAD trains an encoder (the
mechanism under test) whose sequence is pooled into one vector, from which an MLP decoder must
reconstruct every token: a fixed-size bottleneck. attnx's kinds give the same shape: `encoder=self_attn`
with `encoder/attention=NAME` mixes the sequence with the mechanism under test and summarises it as the
mean of its states (MAD pools the compression token's state or the mean), and the decoder reads only
that summary: `attention=fixed_c`, Cho et al. (2014)'s single context C at every step (this task's
default attention). The decoder is attnx's rnn, autoregressive where MAD's MLP decodes each position
from C and its position alone. Accuracy is per target token, the compression token included, as MAD's:
`test/token_acc` (decoded greedily), with `test/exact_match` for whole sequences.

MAD's baseline (the defaults): vocab_size 16, seq_len 32, train_size 12,800, test_size 1,280 and
batch_size 128 (MADConfig). Its changes: vocab_size 32/64/128, seq_len 64/128/256, train_size
6,400/3,200/1,600/800. Splits never share a source.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnx.registry import register_task
from attnx.tasks.base import PaddedSplit, check
from attnx.tasks.drawn import DrawnTask
from attnx.tasks.synthetic import with_bos_eos
from attnx.vocab import SPECIALS, Vocab

_FIRST_SYMBOL = len(SPECIALS)  # token t has id _FIRST_SYMBOL + t


@register_task("compression")
class CompressionTask(DrawnTask):
    """MAD's compression (module docstring): run with `encoder=self_attn encoder/attention=NAME`
    (conf/task_defaults/compression.yaml sets its sizes)."""

    model_type = "seq2seq"
    default_attention = "fixed_c"  # the decoder reads the encoder's summary only

    def __init__(
        self,
        vocab_size: int = 16,
        seq_len: int = 32,
        train_size: int = 12800,  # SizedTask's and Task's arguments, with MAD's defaults
        test_size: int = 1280,
        batch_size: int = 128,
        **kwargs: Any,
    ) -> None:
        super().__init__(train_size=train_size, test_size=test_size, batch_size=batch_size, **kwargs)
        check("vocab_size", vocab_size, vocab_size >= 3, ">= 3 (two tokens and the compression token)")
        check("seq_len", seq_len, seq_len >= 2, ">= 2 (a token and the compression token)")
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.src_vocab = self.tgt_vocab = Vocab(str(t) for t in range(vocab_size))

    def sample(self, n: int, split: str, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """`n` sources: (token ids [n, seq_len], lengths [n])."""
        tokens = torch.randint(0, self.vocab_size - 1, (n, self.seq_len), generator=generator)
        tokens[:, -1] = self.vocab_size - 1
        return tokens + _FIRST_SYMBOL, torch.full((n,), self.seq_len)

    def padded(self, split: str, src: Tensor, drawn: Tensor) -> PaddedSplit:
        return PaddedSplit(src, drawn, *with_bos_eos(src, drawn))
