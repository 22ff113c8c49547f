"""ListOps as in the Long Range Arena (Tay et al. 2020), after Nangia & Bowman (2018).

Nested prefix expressions over digits, e.g. "[MAX 2 9 [MIN 4 7 ] 0 ]" -> 9, with operators MIN,
MAX, MED (median, rounded down) and SM (sum modulo 10). The generator is LRA's: a node below
`max_depth` is an operator with probability 0.25, else a digit; an operator takes 2-`max_args`
arguments. Trees outside [min_len, max_len] tokens are redrawn (LRA's rejection sampling), and a
tree stops growing as soon as it passes max_len so long draws cost little. The parentheses of
LRA's files are omitted, as its input pipeline strips them. Label = the value, 10 classes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from attnx.registry import register_task
from attnx.tasks.base import SizedTask, check, check_lengths
from attnx.tasks.text import Example, TextTask, unique_examples
from attnx.vocab import Vocab

VALUE_P = 0.25  # LRA's probability that a node below max_depth is an operator
DIGITS = tuple(str(d) for d in range(10))
END = "]"


def _median(values: list[int]) -> int:
    ordered, mid = sorted(values), len(values) // 2
    return ordered[mid] if len(values) % 2 else (ordered[mid - 1] + ordered[mid]) // 2  # LRA: int(np.median)


OPERATORS: dict[str, Callable[[list[int]], int]] = {
    "[MIN": min,
    "[MAX": max,
    "[MED": _median,
    "[SM": lambda values: sum(values) % 10,
}


_OPERATOR_NAMES = tuple(OPERATORS)


class _TooLong(Exception):
    """Raised to abandon a tree that can no longer end within max_len tokens."""


def sample_tree(
    rng: random.Random, max_depth: int, max_args: int, max_len: int
) -> tuple[list[str], int] | None:
    """One LRA tree as (tokens, value), or None as soon as it cannot fit in `max_len` tokens.

    `floor` is the tree's shortest possible final length (each pending argument a digit), so a tree
    bound to be too long is abandoned at once; rejection sampling needs only that it is rejected.
    """
    tokens: list[str] = []
    floor = 1
    uniform = rng.random  # int(uniform() * n) instead of randrange/choice: several times faster, same law

    def node(depth: int) -> int:
        nonlocal floor
        if depth >= max_depth or uniform() >= VALUE_P:
            value = int(uniform() * 10)
            tokens.append(DIGITS[value])
            return value
        op = _OPERATOR_NAMES[int(uniform() * len(_OPERATOR_NAMES))]
        arity = 2 + int(uniform() * (max_args - 1))
        floor += arity + 1  # its arguments and END, beyond the one token its parent reserved for it
        if floor > max_len:
            raise _TooLong
        tokens.append(op)
        values = [node(depth + 1) for _ in range(arity)]
        tokens.append(END)
        return OPERATORS[op](values)

    try:
        value = node(1)
    except _TooLong:
        return None
    return tokens, value


@register_task("listops")
class ListOpsTask(TextTask, SizedTask):
    """Evaluate a nested MIN/MAX/MED/SM expression; lengths in tokens (LRA uses 500-2000)."""

    model_type = "classification"

    def __init__(
        self,
        min_len: int = 20,
        max_len: int = 100,
        max_depth: int = 10,
        max_args: int = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_lengths("min_len", min_len, "max_len", max_len)
        check("max_depth", max_depth, max_depth >= 1, ">= 1")
        check("max_args", max_args, max_args >= 2, ">= 2")
        self.min_len, self.max_len, self.max_depth, self.max_args = min_len, max_len, max_depth, max_args

    def build_vocab(self, train_tokens: list[list[str]]) -> Vocab:
        return Vocab([*OPERATORS, END, *DIGITS])  # closed: a small train split need not show every token

    def build_classes(self, train_labels: list[str]) -> list[str]:
        return list(DIGITS)

    def examples(self) -> dict[str, list[Example]]:
        return unique_examples(self.expression, self.sizes, self.seed)

    def expression(self, rng: random.Random) -> Example | None:
        tree = sample_tree(rng, self.max_depth, self.max_args, self.max_len)
        if tree is None or len(tree[0]) < self.min_len:
            return None
        return " ".join(tree[0]), DIGITS[tree[1]]
