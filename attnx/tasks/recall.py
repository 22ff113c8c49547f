"""MAD's recall tasks (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid Architectures";
athms/mad-lab `mad/data/instances.py`, `configs/tasks/*.yml`): in-context, noisy and fuzzy recall, one
generator, language-model tasks.

The vocabulary's tokens "0".."V−1" are `noise_vocab_size` noise tokens (null: none) at the top, below
them, when a motif is longer than one token, the filler "V−1", and the rest: key tokens (the lower half)
and value tokens (the upper half). A key is a motif of 1..`k_motif_size` distinct key tokens (train; val
and test prompt with keys of exactly `k_motif_size` tokens, as MAD's test split does), a value a motif of
1..`v_motif_size` distinct value tokens; each key is bound to one value per sequence, drawn uniformly the
first time it occurs. A sequence of `seq_len` tokens is a run of slots, each a key followed by its value
or, with probability `frac_noise`, as many noise tokens (at least one slot is a pair), filled from the
left while seq_len − k_motif_size − v_motif_size tokens allow; then a key drawn uniformly from the
distinct keys presented, followed by its value (MAD's probe); the filler pads the sequence on the left to
`seq_len` tokens. The model reads the first seq_len − 1 tokens (MAD's `inputs[:-1]`) and predicts each
value token of a key presented before (MAD's multi-query mode, its baseline): the target at position t is
token t + 1 when that token lies in the value of a key that an earlier pair already bound, PAD elsewhere,
so training and accuracy count those positions only, as MAD's test targets do (MAD trains on every next
token, its `is_training` targets, and scores at these positions; here both use them). The rule: the answer
is the value that the nearest earlier pair with the same key holds; `window_ceiling(w)` is the share of
answers whose pair lies within w positions.

MAD's baselines and changes (`configs/tasks/`), the defaults of the three registered tasks:

    in_context_recall  vocab_size 16, seq_len 128, k/v motifs 1, no noise
    noisy_recall       vocab_size 32, noise_vocab_size 16, frac_noise 0.2 (changes: vocab_size 48/80/144,
                       frac_noise 0.4/0.6/0.8)
    fuzzy_recall       vocab_size 16, k_motif_size 3, v_motif_size 3
    all: seq_len 128 (changes 256/512/1024), train_size 12,800 (changes 6,400/3,200/1,600/800),
         vocab_size changes 32/64/128 (noisy: above); test_size 1,280 and batch_size 128 (MADConfig)

Differences from MAD's generator, none changing what is asked: every random draw comes from the task's
own generator per split; a key's value is drawn up front (equal in distribution to drawing it at first
sight); the probe is appended at the end only (MAD also plants it at a random earlier place, where
multi-query targets it anyway); fuzzy sequences pad one token less (MAD pads to seq_len + 1, then
shifts). Splits never share a sequence (`draw_unseen`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnx.registry import register_task
from attnx.tasks.base import PaddedSplit, check
from attnx.tasks.drawn import DrawnTask
from attnx.vocab import PAD, SPECIALS, Vocab

_FIRST_SYMBOL = len(SPECIALS)  # token t has id _FIRST_SYMBOL + t


def distinct(shape: tuple[int, ...], count: int, high: int, generator: torch.Generator) -> Tensor:
    """[*shape, count] rows of distinct ints in [0, high), every ordered tuple equally likely: the j-th
    is uniform over the high − j values not yet taken (MAD's `permutations` of the vocabulary)."""
    rows = torch.empty(*shape, count, dtype=torch.long)
    for j in range(count):
        pick = torch.randint(0, high - j, shape, generator=generator)
        for taken in rows[..., :j].sort(-1).values.unbind(-1):  # skip each taken value, smallest first
            pick += pick >= taken
        rows[..., j] = pick
    return rows


def previous_of(group: Tensor, valid: Tensor) -> Tensor:
    """[N] for each valid element the flat index of the nearest valid element before it in its group,
    -1 when none (and for invalid elements): elements of a group lie in index order."""
    index = valid.nonzero().squeeze(1)
    ordered = index[group[index].sort(stable=True).indices]
    same = group[ordered[1:]] == group[ordered[:-1]]
    previous = torch.full_like(group, -1)
    previous[ordered[1:][same]] = ordered[:-1][same]
    return previous


@register_task("in_context_recall")
class InContextRecallTask(DrawnTask):
    """MAD's in-context recall (module docstring); `noisy_recall` and `fuzzy_recall` are this task
    with MAD's other defaults. Metrics: accuracy at the answer positions (`test/acc`)."""

    model_type = "lm"
    default_attention = "multi_head"

    def __init__(
        self,
        vocab_size: int = 16,
        seq_len: int = 128,
        k_motif_size: int = 1,
        v_motif_size: int = 1,
        noise_vocab_size: int | None = None,  # MADConfig's 0: attnx takes sizes >= 1, or null for none
        frac_noise: float = 0.0,
        train_size: int = 12800,  # SizedTask's and Task's arguments, with MAD's defaults
        test_size: int = 1280,
        batch_size: int = 128,
        **kwargs: Any,
    ) -> None:
        super().__init__(train_size=train_size, test_size=test_size, batch_size=batch_size, **kwargs)
        check("k_motif_size", k_motif_size, k_motif_size >= 1, ">= 1")
        check("v_motif_size", v_motif_size, v_motif_size >= 1, ">= 1")
        check("noise_vocab_size", noise_vocab_size, noise_vocab_size is None or noise_vocab_size >= 1, ">= 1")
        check("frac_noise", frac_noise, 0 <= frac_noise < 1, "in [0, 1)")
        check(
            "frac_noise", frac_noise, frac_noise == 0 or bool(noise_vocab_size), "0 without noise_vocab_size"
        )
        noise_vocab_size = noise_vocab_size or 0
        motifs = k_motif_size + v_motif_size
        self.filler = motifs > 2  # longer motifs leave gaps, padded with the last token
        keys = (vocab_size - noise_vocab_size - self.filler) // 2
        values = vocab_size - noise_vocab_size - self.filler - keys
        check(
            "vocab_size",
            vocab_size,
            keys >= k_motif_size and values >= v_motif_size,
            f">= 2 * max(k_motif_size, v_motif_size) + noise_vocab_size{' + 1 (the filler)' * self.filler} = "
            f"{2 * max(k_motif_size, v_motif_size) + noise_vocab_size + self.filler} (keys and values of "
            "distinct tokens, each from its half of the non-noise tokens)",
        )
        check(
            "seq_len", seq_len, seq_len >= 2 * motifs, f">= 2 * (k_motif_size + v_motif_size), {2 * motifs}"
        )
        check(
            "seq_len", seq_len, self.filler or seq_len % 2 == 0, "even (pairs of a key and a value fill it)"
        )
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.k_motif_size, self.v_motif_size = k_motif_size, v_motif_size
        self.keys, self.values = keys, values
        self.noise_vocab_size, self.frac_noise = noise_vocab_size, frac_noise
        self.src_vocab = Vocab(str(t) for t in range(vocab_size))
        self.support: dict[str, Tensor] = {}

    def padded(self, split: str, src: Tensor, drawn: Tensor) -> PaddedSplit:
        tgt, self.support[split] = drawn.unbind(1)
        return super().padded(split, src, tgt)

    def query_mask(self, src: Tensor) -> Tensor:
        """[B, T] bool: where the next token lies in the value of a key an earlier pair bound (`attnx
        predict`), the rule read off the tokens: a run of key tokens then one of value tokens is a pair,
        and the input is taken to stop inside the last value (as a split's inputs do)."""
        mask = torch.zeros_like(src, dtype=torch.bool)
        for row, tokens in enumerate((src - _FIRST_SYMBOL).tolist()):
            kinds = [
                (t >= self.keys) + (t >= self.keys + self.values) for t in tokens
            ]  # key 0, value 1, other 2
            starts = [i for i in range(len(kinds)) if i == 0 or kinds[i] != kinds[i - 1]]
            ends = [*starts[1:], len(kinds)]
            seen = set()
            for run, (start, end) in enumerate(zip(starts, ends)):
                after = kinds[end] if end < len(kinds) else None
                if kinds[start] != 0 or after == 2:
                    continue
                key = tuple(tokens[start:end])
                if (
                    key in seen
                ):  # the key's last token, and each value token but one that is not the input's last
                    stop = ends[run + 1] if after == 1 else end
                    mask[row, end - 1 : stop - (stop < len(kinds))] = True
                seen.add(key)
        return mask

    def window_ceiling(self, window: int, split: str = "test") -> float:
        """The share of `split`'s answers whose supporting pair (the nearest earlier one with the same
        key) starts within `window` positions of the query, i.e. at j > t − window: what one layer of
        causal sliding-window attention of that width (W(t) = {j : t − w < j ≤ t}) can read."""
        self.setup()
        support = self.support[split]
        answers = support >= 0
        query = torch.arange(answers.shape[1]).expand_as(answers)
        reached = support > query - window
        return float(reached[answers].float().mean())

    def sample(self, n: int, split: str, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """`n` sequences: (token ids [n, seq_len − 1], [n, 2, seq_len − 1] stacking the targets (PAD
        where none) and where each answer's supporting pair starts (-1 where none))."""
        slots = self._slots(n, split, generator)
        tokens, answer, support = self._lay_out(slots, generator)
        targets = torch.where(answer[:, 1:], tokens[:, 1:] + _FIRST_SYMBOL, PAD)  # t predicts token t + 1
        support = support[:, 1:].where(answer[:, 1:], -1)
        return tokens[:, :-1] + _FIRST_SYMBOL, torch.stack([targets, support], 1)

    def _slots(self, n: int, split: str, generator: torch.Generator) -> dict[str, Tensor]:
        """Each sequence's slots [n, S + 1] (the probe last): key and value motifs ([..., motif], -1
        past their sizes), sizes, whether a slot is laid out, noise, its start, whether its value
        answers (its key was presented before) and where the pair it recalls starts."""
        kmax, vmax, length = self.k_motif_size, self.v_motif_size, self.seq_len
        count = length // 2  # every slot holds two tokens at least
        k_size = torch.randint(1 if split == "train" else kmax, kmax + 1, (n, count), generator=generator)
        v_draw = torch.randint(1, vmax + 1, (n, count), generator=generator)
        keys = distinct((n, count), kmax, self.keys, generator)
        values = self.keys + distinct((n, count), vmax, self.values, generator)
        keys.masked_fill_(torch.arange(kmax) >= k_size[..., None], -1)
        example = torch.arange(n)[:, None, None].expand(n, count, 1)
        # a group is one key of one sequence: its example and its tokens
        group = torch.unique(torch.cat([example, keys], -1).flatten(0, 1), dim=0, return_inverse=True)[1]
        flat = torch.arange(n * count)
        first = torch.full((int(group.max()) + 1,), n * count).scatter_reduce(0, group, flat, "amin")[group]
        v_size = v_draw.flatten()[first].view(n, count)  # a key's value: the one drawn where it first occurs
        values = values.flatten(0, 1)[first].view(n, count, vmax)
        sizes = k_size + v_size
        ends = sizes.cumsum(1)
        kept = ends <= length - kmax - vmax  # leaves room for the probe
        noise = (torch.rand(n, count, generator=generator) < self.frac_noise) & kept
        sure = (torch.rand(n, generator=generator) * kept.sum(1)).long()  # one slot at least is a pair
        noise[torch.arange(n), sure] = False
        pairs = (kept & ~noise).flatten()
        previous = previous_of(group, pairs)
        latest = torch.full_like(first, -1).scatter_reduce(0, group[pairs], flat[pairs], "amax")[group]
        # the probe: a key drawn uniformly from the distinct keys presented (their first pairs)
        firsts = (pairs & (previous < 0)).view(n, count)
        probe = torch.rand(n, count, generator=generator).masked_fill(~firsts, -1).argmax(1)
        rows = torch.arange(n)
        used = (sizes * kept).sum(1)
        pad = length - used - sizes[rows, probe]  # the filler before the first slot
        recalled = torch.cat([previous.view(n, count), latest[rows * count + probe][:, None]], 1)
        starts = torch.cat([pad[:, None] + ends - sizes, (pad + used)[:, None]], 1)

        def with_probe(x: Tensor) -> Tensor:
            return torch.cat([x, x[rows, probe][:, None]], 1)

        return {
            "keys": with_probe(keys),
            "values": with_probe(values),
            "k_size": with_probe(k_size),
            "v_size": with_probe(v_size),
            "live": torch.cat([kept, torch.ones(n, 1, dtype=torch.bool)], 1),
            "noise": torch.cat([noise, torch.zeros(n, 1, dtype=torch.bool)], 1),
            "start": starts,
            "answers": recalled >= 0,
            "support": starts.gather(1, recalled.clamp(min=0) % count),
        }

    def _lay_out(self, slots: dict[str, Tensor], generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """The slots written into sequences [n, seq_len]: tokens (the filler where no slot stands), whether
        a token is an answer, and the start of the pair that supports it (-1 where none)."""
        kmax, vmax = self.k_motif_size, self.v_motif_size
        k_size = slots["k_size"][..., None]
        offset = torch.arange(kmax + vmax)
        in_key = offset < k_size
        at = torch.where(in_key, offset, kmax + offset - k_size).clamp(max=kmax + vmax - 1)
        tokens = torch.cat([slots["keys"], slots["values"]], -1).gather(-1, at)
        noise = torch.randint(0, max(self.noise_vocab_size, 1), tokens.shape, generator=generator)
        noise += self.keys + self.values
        tokens = torch.where(slots["noise"][..., None], noise, tokens)
        real = slots["live"][..., None] & (offset < k_size + slots["v_size"][..., None])
        answer = ~in_key & (slots["answers"] & ~slots["noise"])[..., None]
        row = torch.arange(len(tokens))[:, None, None].expand_as(tokens)[real]
        column = (slots["start"][..., None] + offset)[real]
        shape = (len(tokens), self.seq_len)
        sequence = torch.full(shape, self.vocab_size - 1)
        is_answer = torch.zeros(shape, dtype=torch.bool)
        support = torch.full(shape, -1)
        sequence[row, column] = tokens[real]
        is_answer[row, column] = answer[real]
        support[row, column] = slots["support"][..., None].expand_as(tokens)[real]
        return sequence, is_answer, support


@register_task("noisy_recall")
class NoisyRecallTask(InContextRecallTask):
    """MAD's noisy in-context recall: `in_context_recall` with a fifth of the slots noise from 16 noise
    tokens, over 32 tokens (`configs/tasks/noisy-in-context-recall.yml`)."""

    def __init__(
        self, vocab_size: int = 32, noise_vocab_size: int = 16, frac_noise: float = 0.2, **kwargs: Any
    ) -> None:
        super().__init__(
            vocab_size=vocab_size, noise_vocab_size=noise_vocab_size, frac_noise=frac_noise, **kwargs
        )


@register_task("fuzzy_recall")
class FuzzyRecallTask(InContextRecallTask):
    """MAD's fuzzy in-context recall: `in_context_recall` with keys and values of up to 3 tokens
    (`configs/tasks/fuzzy-in-context-recall.yml`); test keys have exactly `k_motif_size` tokens."""

    def __init__(self, k_motif_size: int = 3, v_motif_size: int = 3, **kwargs: Any) -> None:
        super().__init__(k_motif_size=k_motif_size, v_motif_size=v_motif_size, **kwargs)
