"""The rows `attnx bench` measures: a `Setting` is one module at one width (and head count, where it has
heads), built as `attnx train` builds it (`module_for`), and the grids of them the command line asks for.

Each attention setting runs as self-attention over N positions of width d: queries, keys and values are
the same [batch, N, d] states, as in a Transformer layer (a mechanism's `memory()` decides what it
attends to: `fixed_c` reads one summary slot). Encoder settings run over N tokens; the rnn encoder is
the linear-time reference. An lm setting runs the lm kind's whole decoder-only model (embedding, one
block whose causal self-attention is the mechanism, the next-token head); an lm row may name a per-layer
plan, `base_conv+based`, one block per mechanism (`attnx.models.plan`).

Each row has a memory budget at its largest N, from the growth its mechanism declares
(`Attention.memory_growth`; the rnn encoder is linear, the self_attn one quadratic): LINEAR_FLOATS
float32 numbers per token and channel, N·d·batch of them, plus for a quadratic row QUADRATIC_FLOATS N×N
matrices per head. Never imports Lightning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from attnx import registry
from attnx.models.assembly import build_host, build_model
from attnx.models.sites import score_factory
from attnx.nn.attention import Attention

VOCAB = 100  # token ids for the encoder and lm rows; the embedding size barely matters

# How each reference encoder takes the grid's width d, heads and longest N.
ENCODERS: dict[str, Callable[[int, int | None, int], dict[str, Any]]] = {
    "rnn": lambda d, heads, max_len: {"embed_dim": d, "hidden_dim": d // 2},  # two directions -> d
    "self_attn": lambda d, heads, max_len: {
        "d_model": d,
        "attention": {"name": "multi_head", "num_heads": heads},
        "num_layers": 1,
        "ff_dim": 2 * d,
        "max_len": max_len,
    },
}
ENCODER_HEADS = {"rnn": False, "self_attn": True}
ENCODER_GROWTH = {"rnn": 1, "self_attn": 2}  # as a mechanism's memory_growth

# Memory budgets in float32 numbers (BYTES each) at a row's fwd+bwd peak: inputs, projections and
# activations with their gradients are a few dozen N·d each row; softmax's scores and weights with
# their gradients are a few N×N per head.
BYTES = 4
LINEAR_FLOATS = 32  # per token and channel: × N·d·batch
QUADRATIC_FLOATS = 4  # N×N matrices per head: × N²·heads·batch


@dataclass(frozen=True)
class Setting:
    """One row of the benchmark: a module at one width (and head count, where it has heads). Not the
    kit's `attnx.testing.cases.Case`, which is a check a mechanism must pass."""

    kind: str  # "attention" | "encoder" | "lm" (a decoder-only model of a block per mechanism of `name`)
    name: str
    score: str | None
    dim: int
    heads: int | None
    causal: bool = False

    @property
    def label(self) -> str:
        what = f"{self.name}/{self.score}" if self.score else self.name
        if self.kind == "encoder":
            what = f"{self.name} encoder"
        elif self.kind == "lm":
            what = f"lm ({self.name})"
        heads = f" h={self.heads}" if self.heads else ""
        return f"{what} d={self.dim}{heads}" + (" causal" if self.causal else "")

    @property
    def memory_growth(self) -> int:
        if self.kind == "encoder":
            return ENCODER_GROWTH[self.name]
        return max(attention_class(name).memory_growth for name in layers(self.name))


def layers(name: str) -> list[str]:
    """The mechanisms of an lm row's blocks: `base_conv+based` is a plan of two, a name alone one block."""
    return name.split(PLAN)


PLAN = "+"  # between the mechanisms of an lm row's plan, as `attnx.models.plan.label` writes it


def attention_class(name: str) -> type[Attention]:
    """The registered mechanism `name`, typed: the registry holds only `Attention` subclasses of this kind."""
    cls = registry.get("attention", name)
    assert issubclass(cls, Attention)
    return cls


def attention_settings(
    names: Sequence[str],
    scores: Sequence[str] | None,
    dims: Sequence[int],
    heads: Sequence[int],
    causal: bool,
) -> list[Setting]:
    """Every (mechanism, score, d, heads): a mechanism that takes a score runs with each of `scores`
    (its own when None), one that takes none without."""
    found: list[Setting] = []
    for name in names:
        own = attention_class(name).default_score
        chosen: Sequence[str | None] = [None] if own is None else (scores or [own])
        for score in chosen:
            found += [
                Setting("attention", name, score, d, h, causal) for d, h in widths(dims, heads, _heads(name))
            ]
    return found


def lm_settings(names: Sequence[str], dims: Sequence[int], heads: Sequence[int]) -> list[Setting]:
    """Each mechanism as the causal self-attention of a one-block decoder-only model; a plan
    (`sliding_window+linear`) as one block per mechanism."""
    found: list[Setting] = []
    for name in names:
        for layer in layers(name):
            if not attention_class(layer).causal:
                raise ValueError(
                    f"--lm {name}: {layer} declares no causal mask, so it cannot be an lm's self-attention"
                )
        has_heads = any(_heads(layer) for layer in layers(name))
        found += [Setting("lm", name, None, d, h, causal=True) for d, h in widths(dims, heads, has_heads)]
    return found


def encoder_settings(names: Sequence[str], dims: Sequence[int], heads: Sequence[int]) -> list[Setting]:
    found: list[Setting] = []
    for name in names:
        if name not in ENCODERS:
            raise ValueError(f"--encoder must name some of {', '.join(ENCODERS)}; got {name!r}")
        found += [Setting("encoder", name, None, d, h) for d, h in widths(dims, heads, ENCODER_HEADS[name])]
    return found


def _heads(name: str) -> bool:
    return "num_heads" in registry.registry("attention").entry(name).hyperparams()


def widths(dims: Sequence[int], heads: Sequence[int], has_heads: bool) -> list[tuple[int, int | None]]:
    """(d, heads) pairs of the grid; heads None for a module without them."""
    if not has_heads:
        return [(d, None) for d in dims]
    for d in dims:
        for h in heads:
            if d % h:
                raise ValueError(f"--heads must divide --dim; got d={d}, heads={h}")
    return [(d, h) for d in dims for h in heads]


def module_for(setting: Setting, max_len: int) -> nn.Module:
    """The module a setting measures, built as `attnx train` builds it."""
    if setting.kind == "encoder":
        params = ENCODERS[setting.name](setting.dim, setting.heads, max_len)
        return build_host("encoder", {"name": setting.name, **params}, vocab_size=VOCAB)
    hyper = {} if setting.heads is None else {"num_heads": setting.heads}
    if setting.kind == "lm":
        planned = [{"name": name, **(hyper if _heads(name) else {})} for name in layers(setting.name)]
        lm: dict[str, Any] = {"d_model": setting.dim, "num_layers": len(planned), "ff_dim": 2 * setting.dim}
        lm |= {"dropout": 0.0, "positions": "sinusoidal", "max_len": max_len}
        if len(planned) > 1:
            lm["layers"] = planned
        return build_model("lm", VOCAB, None, planned[0], None, {}, lm=lm)
    factory = None if setting.score is None else score_factory({"name": setting.score})
    d = setting.dim
    return registry.build(
        "attention", {"name": setting.name, **hyper}, query_dim=d, key_dim=d, value_dim=d, score=factory
    )


def budget(growth: int, n: int, dim: int, heads: int | None, batch: int) -> float:
    """Bytes a row of memory growth 1 or 2 may hold at its peak over n positions (module docstring)."""
    floats = LINEAR_FLOATS * n * dim * batch
    if growth > 1:
        floats += QUADRATIC_FLOATS * n * n * (heads or 1) * batch
    return floats * BYTES


def budget_rule(growth: int) -> str:
    linear = f"{LINEAR_FLOATS}·N·d·batch"
    return linear if growth == 1 else f"{linear} + {QUADRATIC_FLOATS}·N²·heads·batch"
