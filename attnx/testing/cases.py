"""The conformance kit's inputs: what is checked (a `Subject`), the settings it is checked in (`Setting`:
lengths, parameters, mode), and the calls in each setting (`Case`s, random float64 tensors from fixed
seeds). Calling a mechanism on a case and comparing outputs is `calls.py`'s."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnx.nn.attention import Attention, Mechanism
from attnx.nn.positions import Positions
from attnx.nn.scores import Score, ScoreFactory
from attnx.testing.calls import call, construct

DIMS = ((8, 6, 5), (8, 8, 5))  # cross-attention (query, key, value); the second when Dq == Dk is needed
SELF_DIM = 8  # self-attention's one width (divisible by multi_head's default 4 heads)
EXTRA = 3  # padding the padding check adds
SHORT = (5, 3, 1)  # valid tokens per sequence; the last has a single valid key
# beyond 64 and a multiple of no power of two: a fast path in chunks or blocks of 8..64 runs past its first
# block and ends in a partial one (the single key is the short settings')
LONG = (67, 37)
# where a long sequence is cut or compared: the first two positions, the first and second of the blocks
# of 16, 32 and 64 (a chunked fast path errs at its edges), and the last; a short one everywhere
EDGES = (1, 2, 16, 17, 32, 33, 64, 65)
PERTURBATION = 0.5  # parameters move by this many of their own standard deviations (1 for constant ones)


@dataclass(frozen=True)
class Setting:
    """Where the checks run: the valid lengths of a batch's sequences, parameters as initialised or moved
    away from it (as after training: a term initialised at zero is then visible), and the module's mode
    (train mode with every nn.Dropout at p = 0, so outputs stay deterministic)."""

    lengths: tuple[int, ...]
    perturbed: bool
    train: bool

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def tk(self) -> int:
        return max(self.lengths)

    def __str__(self) -> str:
        parameters = "perturbed" if self.perturbed else "initial"
        return f"{parameters} parameters, {'train' if self.train else 'eval'} mode"


# each check runs in each: a failure only in the second is the mode's or the parameters', only in the
# third the length's
SETTINGS = (
    Setting(SHORT, perturbed=False, train=False),
    Setting(SHORT, perturbed=True, train=True),
    Setting(LONG, perturbed=True, train=False),
)


# ---------------------------------------------------------------------------------------------
# What is checked: a subject, and the calls (cases) it is checked with


@dataclass
class Subject:
    """A mechanism class with its score and hyperparameters: what every check examines. A score
    checked alone is the score inside `SoftmaxAttention` (`score_cls` set)."""

    cls: type[Attention]
    score: ScoreFactory | None
    hyperparams: dict[str, Any]
    label: str
    uses_positions: bool = False
    score_cls: type[Score] | None = None
    score_hyperparams: dict[str, Any] = field(default_factory=dict)
    dims: tuple[int, int, int] | None = None  # a run's (query, key, value) dims; None: the kit's own
    vary: tuple[str, ...] = ("attention", "score")  # whose hyperparameters the `hyperparameters` check varies
    skip: tuple[str, ...] = ()  # checks left to another subject (`suite.pairs`: the mechanism's own pair)
    _built: dict[tuple, tuple[Attention, tuple[int, int, int]]] = field(default_factory=dict, repr=False)
    _cases: dict[Setting, list[tuple[Attention, Case]]] = field(default_factory=dict, repr=False)
    _outputs: dict[tuple[int, bool], tuple[Case, tuple[torch.Tensor, torch.Tensor | None]]] = field(
        default_factory=dict, repr=False
    )
    memo: dict[Any, Any] = field(default_factory=dict, repr=False)  # what checks share, made once

    def make(self, query_dim: int, key_dim: int, value_dim: int) -> Attention:
        return self.mechanism()(query_dim, key_dim, value_dim)

    def score_class(self) -> type[Score] | None:
        """The class of the plugin's score: the score checked alone, or the class behind the factory a
        mechanism is checked with (None for its default score, or a factory function)."""
        if self.score_cls is not None:
            return self.score_cls
        target = self.score
        while isinstance(target, partial):
            target = target.func
        return target if isinstance(target, type) else None

    @property
    def cross_dims(self) -> tuple[tuple[int, int, int], ...]:
        """The (query, key, value) dims cross-attention is built for: the run's, or the kit's `DIMS`."""
        return DIMS if self.dims is None else (self.dims,)

    @property
    def self_dim(self) -> int:
        """Self-attention's one width: the run's query width, or the kit's `SELF_DIM`."""
        return SELF_DIM if self.dims is None else self.dims[0]

    def mechanism(self) -> Mechanism:
        return Mechanism(self.cls, self.score, self.hyperparams)

    def build(
        self, options: tuple[tuple[int, int, int], ...], setting: Setting
    ) -> tuple[Attention, tuple[int, int, int]]:
        """The mechanism for the first dims it accepts, in float64, prepared for `setting` (built once)."""
        key = (options, setting.perturbed, setting.train)
        if key not in self._built:
            att, dims = self._built.get((options, False, False)) or construct(self.make, options)
            self._built[key] = prepared_for(att, setting), dims
        return self._built[key]

    def cases(self, setting: Setting) -> list[tuple[Attention, Case]]:
        """`cases_for` the setting, made once: every check calls with the same inputs."""
        if setting not in self._cases:
            self._cases[setting] = cases_for(self, setting)
        return self._cases[setting]

    def case(self, setting: Setting, fits: Callable[[Case], bool]) -> tuple[Attention, Case]:
        """The first of `cases(setting)` that `fits` (the caller knows the flags make one)."""
        return next((att, case) for att, case in self.cases(setting) if fits(case))

    def output(
        self, att: Attention, case: Case, need_weights: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`call(att, case, need_weights)` for one of `cases(setting)`, computed once: most checks start
        from it."""
        key = (id(case), need_weights)
        if key not in self._outputs or self._outputs[key][0] is not case:  # ids of dead cases are reused
            self._outputs[key] = case, call(att, case, need_weights)
        return self._outputs[key][1]


def prepared_for(module: nn.Module, setting: Setting) -> Any:
    """A copy of `module` with perturbed parameters and in train mode (dropout p = 0) as `setting` says."""
    if not (setting.perturbed or setting.train):
        return module
    module = copy.deepcopy(module)
    if setting.perturbed:
        perturb(module)
    if setting.train:
        module.train()
        for m in module.modules():
            if isinstance(m, nn.modules.dropout._DropoutNd):
                m.p = 0.0
    return module


@torch.no_grad()
def perturb(module: nn.Module, seed: int = 5) -> None:
    """Every parameter p += PERTURBATION · std(p) · ε (std 1 for a constant or single-element p: a table
    initialised at zero, a scalar gate)."""
    g = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        std = p.std().item() if p.numel() > 1 else 0.0
        noise = torch.randn(p.shape, generator=g, dtype=p.dtype).to(p.device)
        p.add_(PERTURBATION * (std if std > 0 else 1.0) * noise)


@dataclass(frozen=True)
class Case:
    """One call's inputs in a setting the mechanism declares: cross-attention (queries apart from the
    keys) or self-attention (query = keys = values = `query`, padded like the keys). `real` [B, Tq]
    marks the queries whose outputs the contract constrains."""

    kind: str
    setting: Setting
    query: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor
    real: torch.Tensor
    positions: Positions | None
    self_attention: bool = False

    @property
    def tq(self) -> int:
        return self.query.size(1)

    @property
    def batch(self) -> int:
        return self.query.size(0)

    @property
    def causal(self) -> bool:
        return self.positions is not None and self.positions.causal

    @property
    def many_queries(self) -> bool:
        """A cross-attention call of several queries (a target under teacher forcing)."""
        return not self.self_attention and self.tq > 1

    @property
    def name(self) -> str:
        """What a failure message names: the call's kind and lengths, and the setting."""
        return f"{self.kind}; {self.setting}"

    def where(self, need_weights: bool | None = None, dtype: str = "float64") -> str:
        """The call in full for a message: kind, lengths, setting, dtype (and need_weights when it varies)."""
        weights = "" if need_weights is None else f", need_weights={need_weights}"
        return f"{self.name}, {dtype}{weights}"

    def mapped(self, f: Callable[[torch.Tensor], torch.Tensor]) -> Case:
        """The case with f applied to its query, keys and values (self-attention's stay one tensor)."""
        if self.self_attention:
            x = f(self.query)
            return dataclasses.replace(self, query=x, keys=x, values=x)
        return dataclasses.replace(self, query=f(self.query), keys=f(self.keys), values=f(self.values))

    def rows(self, index: torch.Tensor) -> Case:
        """These sequences of the batch only (positions shared by the batch stay shared)."""
        pick = partial(torch.index_select, dim=0, index=index)
        at = self.positions
        if at is not None:
            query, key = (p if p.size(0) == 1 else pick(p) for p in (at.query, at.key))
            at = Positions(query, key, at.causal)
        return dataclasses.replace(
            self,
            query=pick(self.query),
            keys=pick(self.keys),
            values=pick(self.values),
            mask=pick(self.mask),
            real=pick(self.real),
            positions=at,
        )


def cross_case(dims: tuple[int, int, int], tq: int, positions: bool, setting: Setting) -> Case:
    """Tq queries attending to the setting's keys, padded to its lengths; queries at 0..Tq-1, keys at
    0..Tk-1."""
    g = torch.Generator().manual_seed(0)
    b, tk = setting.batch, setting.tk
    q, k, v = (torch.randn(b, t, d, generator=g, dtype=torch.float64) for t, d in zip((tq, tk, tk), dims))
    at = Positions(Positions.span(tq), Positions.span(tk)) if positions else None
    real = torch.ones(b, tq, dtype=torch.bool)
    return Case(f"cross-attention, Tq={tq}, Tk={tk}", setting, q, k, v, key_mask(setting.lengths), real, at)


def self_case(x: torch.Tensor, mask: torch.Tensor, causal: bool, positions: bool, setting: Setting) -> Case:
    """x [B, T, D] attending to itself; positions when asked for, and always when causal."""
    at = Positions.self_attention(x.size(1), causal) if positions or causal else None
    kind = f"self-attention{', causal' if causal else ''}, T={x.size(1)}"
    return Case(kind, setting, x, x, x, mask, mask, at, self_attention=True)


def key_mask(lengths: tuple[int, ...], width: int | None = None) -> torch.Tensor:
    """[B, width], True at the valid tokens of each sequence (width: the longest by default)."""
    return torch.arange(width or max(lengths)) < torch.tensor(lengths)[:, None]


def edges(length: int) -> list[int]:
    """The positions 1..length-1 a check cuts at or compares: all of them in a short sequence."""
    if length <= 8:
        return list(range(1, length))
    return sorted({t for t in EDGES if t < length} | {length - 1})


def random_sequence(setting: Setting, dim: int, seed: int = 3) -> torch.Tensor:
    """[B, Tk, dim] random tokens for self-attention."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(setting.batch, setting.tk, dim, generator=g, dtype=torch.float64)


def self_attention_case(subject: Subject, setting: Setting, causal: bool) -> tuple[Attention, Case]:
    """The subject's self-attention mechanism and a random sequence batch of the setting."""
    att, _ = subject.build(((subject.self_dim,) * 3,), setting)
    x = random_sequence(setting, subject.self_dim)
    return att, self_case(x, key_mask(setting.lengths), causal, subject.cls.takes_positions, setting)


def cases_for(subject: Subject, setting: Setting) -> list[tuple[Attention, Case]]:
    """(mechanism, inputs) for every call the flags allow: cross-attention for Tq = 1 and 3,
    self-attention, and causal self-attention."""
    cls, out = subject.cls, []
    if cls.cross_attention:
        att, dims = subject.build(subject.cross_dims, setting)
        out += [(att, cross_case(dims, tq, cls.takes_positions, setting)) for tq in (1, 3)]
    if cls.self_attention:
        out.append(self_attention_case(subject, setting, causal=False))
        if cls.causal:
            out.append(self_attention_case(subject, setting, causal=True))
    return out


def padded(case: Case, fill: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Case:
    """`case` with `fill(x, pad)` applied to its padded keys/values (and queries in self-attention);
    pad [B, T, 1] is True at padding."""
    pad = ~case.mask.unsqueeze(-1)
    if case.self_attention:
        x = fill(case.query, pad)
        return dataclasses.replace(case, query=x, keys=x, values=x)
    return dataclasses.replace(case, keys=fill(case.keys, pad), values=fill(case.values, pad))


def noise(x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """x with large random changes at the padding (pad True)."""
    g = torch.Generator().manual_seed(1)
    return x + pad * 100 * torch.randn(x.shape, generator=g, dtype=x.dtype)


def extended(case: Case) -> Case:
    """`case` padded EXTRA positions further: random inputs there, masked."""
    g = torch.Generator().manual_seed(4)
    more = partial(torch.randn, case.batch, EXTRA, generator=g, dtype=torch.float64)
    mask = F.pad(case.mask, (0, EXTRA), value=False)
    if case.self_attention:
        x = torch.cat([case.query, more(case.query.size(-1))], dim=1)
        causal = case.positions is not None and case.positions.causal
        return self_case(x, mask, causal, case.positions is not None, case.setting)
    keys = torch.cat([case.keys, more(case.keys.size(-1))], dim=1)
    values = torch.cat([case.values, more(case.values.size(-1))], dim=1)
    at = None if case.positions is None else Positions(case.positions.query, Positions.span(keys.size(1)))
    return dataclasses.replace(case, keys=keys, values=values, mask=mask, positions=at)
