"""Token vocabularies with fixed special ids shared by every task and model."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


class Vocab:
    """`itos[i]` is token i; ids 0-3 are PAD, BOS, EOS, UNK in every vocabulary."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self.itos: list[str] = list(SPECIALS) + [t for t in dict.fromkeys(tokens) if t not in SPECIALS]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.stoi.get(t, UNK) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to the first EOS, without PAD/BOS."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i not in (PAD, BOS):
                out.append(self.itos[i])
        return out
