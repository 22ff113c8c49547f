"""What `attnx bench` measures: a `Setting` (one row: a module at one width) at each sequence length N,
one `Point` per N. A function of plain data, so that `attnx compare` takes its timings from here as
values, and `attnx.bench.cli` is only how they are asked for and shown.

Each attention setting runs as self-attention over N positions of width d: queries, keys and values are
the same [batch, N, d] states, as in a Transformer layer (a mechanism's `memory()` decides what it
attends to: `fixed_c` reads one summary slot). Encoder settings run over N tokens; the rnn encoder is
the linear-time reference. An lm setting runs the lm kind's whole decoder-only model (embedding, one
block whose causal self-attention is the mechanism, the next-token head). Per point:

  fwd      inference forward (no autograd), median of `repeats` after `warmup`
  train    forward + backward, same statistics; parameter gradients are freshly allocated each time
  memory   peak tensor memory of each, above what was allocated before (see attnx.bench.measure.peak_memory)
  FLOPs    of the forward, counted by torch.utils.flop_counter.FlopCounterMode (matrix products only)
  state    bytes per sequence a causal self-attention site keeps to decode the token after N: its cache
           as the mechanism declares it (`KVCache.state_size`: `Attention.state_size(N)`, plus the N·d
           inputs a site keeps for a mechanism that re-prepares) × the element size; causal rows only
           (MAD's and Zoology's state axis: softmax's cache grows as 2·N·d, a recurrent state does not)

and the counted attention FLOPs (all of the mechanism's FLOPs but its own input/output projections,
i.e. the Linear layers directly inside it) next to the analytic cost of self-attention from the lecture
notes: 2·N²·d for QKᵀ plus 2·N²·d for weights·V per head of width d, times batch and heads, i.e.
4·N²·d_model·batch. The growth exponent k of time ~ N^k is fitted on the upper half of a row's N grid,
where fixed per-call costs no longer dominate.

Each row has a memory budget at its largest N, from the growth its mechanism declares
(`Attention.memory_growth`; the rnn encoder is linear, the self_attn one quadratic): LINEAR_FLOATS
float32 numbers per token and channel, N·d·batch of them, plus for a quadratic row QUADRATIC_FLOATS N×N
matrices per head. Never imports Lightning.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnx import registry
from attnx.bench.measure import count_flops, median_time, peak_memory
from attnx.models.assembly import build_host, build_model
from attnx.models.sites import score_factory
from attnx.nn.attention import Attention
from attnx.nn.positions import Positions
from attnx.nn.transformer import AttentionSite, KVCache
from attnx.vocab import SPECIALS

VOCAB = 100  # token ids for the encoder and lm rows; the embedding size barely matters
MIB = 2**20

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

    kind: str  # "attention" | "encoder" | "lm" (a decoder-only model of one block of `name`)
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
        return attention_class(self.name).memory_growth


@dataclass(frozen=True)
class Timing:
    """How each point is measured, and how far a row may grow: the same for every row of a run."""

    batch: int = 4
    repeats: int = 5  # timed calls per point (median)
    warmup: int = 2  # untimed calls before timing
    max_seconds: float = 1.0  # the largest fwd+bwd step a row grows into
    max_mib: float = 2048  # the largest fwd+bwd peak memory a row grows into
    threads: int = 1  # torch CPU threads: on a few shared cores a second one mostly waits for the first


@dataclass
class Point:
    """The measurements of one setting at one N (times in ms, memory in MiB, FLOPs in GFLOP)."""

    label: str
    kind: str
    name: str
    score: str | None
    dim: int
    heads: int | None
    causal: bool
    n: int
    batch: int
    threads: int
    device: str
    fwd_ms: float
    train_ms: float
    fwd_mib: float
    train_mib: float
    gflop: float
    attn_gflop: float | None
    analytic_gflop: float | None
    flop_ratio: float | None
    memory_growth: int
    budget_mib: float
    state_bytes: int | None = None  # decoding state per sequence after n tokens (module docstring)
    state_why: str = ""  # why there is none: not a causal row, or undeclared


def attention_class(name: str) -> type[Attention]:
    """The registered mechanism `name`, typed: the registry holds only `Attention` subclasses of this kind."""
    cls = registry.get("attention", name)
    assert issubclass(cls, Attention)
    return cls


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


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
    """Each mechanism as the causal self-attention of a one-block decoder-only model."""
    found: list[Setting] = []
    for name in names:
        if not attention_class(name).causal:
            raise ValueError(
                f"--lm {name}: it declares no causal mask, so it cannot be an lm's self-attention"
            )
        found += [Setting("lm", name, None, d, h, causal=True) for d, h in widths(dims, heads, _heads(name))]
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
        lm: dict[str, Any] = {"d_model": setting.dim, "num_layers": 1, "ff_dim": 2 * setting.dim}
        lm |= {"dropout": 0.0, "positions": "sinusoidal", "max_len": max_len}
        return build_model("lm", VOCAB, None, {"name": setting.name, **hyper}, None, {}, lm=lm)
    factory = None if setting.score is None else score_factory({"name": setting.score})
    d = setting.dim
    return registry.build(
        "attention", {"name": setting.name, **hyper}, query_dim=d, key_dim=d, value_dim=d, score=factory
    )


def workload(
    module: nn.Module, setting: Setting, n: int, batch: int, device: torch.device
) -> tuple[Callable[[], None], Callable[[], None]]:
    """(inference forward, forward + backward) of `module` on fixed random inputs of length n."""
    if setting.kind in ("encoder", "lm"):
        tokens = torch.randint(len(SPECIALS), VOCAB, (batch, n), device=device)
        lengths = torch.full((batch,), n, device=device)
        inputs: list[torch.Tensor] = []

        def run() -> torch.Tensor:
            return module(tokens, lengths).states if setting.kind == "encoder" else module(tokens, lengths)[0]

    else:
        assert isinstance(module, Attention)  # what `module_for` builds for an attention setting
        attention = module
        x = torch.randn(batch, n, setting.dim, device=device, requires_grad=True)
        mask = torch.ones(batch, n, dtype=torch.bool, device=device)
        inputs = [x]

        def run() -> torch.Tensor:
            keys, values, memory_mask = attention.memory(x, x.mean(1), mask)
            at = Positions(Positions.span(n, device), Positions.span(keys.size(1), device), setting.causal)
            return attention(x, keys, values, memory_mask, need_weights=False, positions=at)[0]

    with torch.no_grad():
        grad = torch.randn_like(run())

    def forward() -> None:
        with torch.no_grad():
            run()

    def train() -> None:
        run().backward(grad)
        module.zero_grad(set_to_none=True)  # as optimizer.zero_grad(): the next step allocates again
        for tensor in inputs:
            tensor.grad = None

    return forward, train


def decoding_state(setting: Setting, module: nn.Module, n: int) -> tuple[int | None, str]:
    """(bytes, "") a causal self-attention site of the row's mechanism keeps per sequence to decode the
    token after n tokens, or (None, why not)."""
    if setting.kind == "encoder":
        return None, "an encoder"
    if not setting.causal:
        causal = attention_class(setting.name).causal
        return None, "not a causal row (--causal)" if causal else "no causal mask"
    mechanism = (
        module
        if isinstance(module, Attention)
        else next(m.mechanism for m in module.modules() if isinstance(m, AttentionSite))
    )
    size = KVCache.state_size(mechanism, n)
    if size is None:
        return None, f"{type(mechanism).__name__}.state_size undeclared"
    numbers = next(mechanism.parameters(), torch.empty(()))  # the dtype its cache is kept in
    return size * numbers.element_size(), ""


def measure(setting: Setting, module: nn.Module, n: int, timing: Timing, device: torch.device) -> Point:
    forward, train = workload(module, setting, n, timing.batch, device)
    flops = count_flops(forward)
    total = flops.get("Global", 0)
    attn = analytic = ratio = None
    if setting.kind == "attention":
        root = type(module).__name__
        projections = sum(
            flops.get(f"{root}.{child}", 0)
            for child, layer in module.named_children()
            if isinstance(layer, nn.Linear)
        )
        attn = total - projections
        analytic = 4 * n * n * setting.dim * timing.batch  # 2·N²·d_h (QKᵀ) + 2·N²·d_h (a·V), × heads × batch
        ratio = attn / analytic
    state_bytes, state_why = decoding_state(setting, module, n)
    return Point(
        label=setting.label,
        kind=setting.kind,
        name=setting.name,
        score=setting.score,
        dim=setting.dim,
        heads=setting.heads,
        causal=setting.causal,
        n=n,
        batch=timing.batch,
        threads=torch.get_num_threads(),
        device=str(device),
        fwd_ms=median_time(forward, device, timing.repeats, timing.warmup) * 1e3,
        train_ms=median_time(train, device, timing.repeats, timing.warmup) * 1e3,
        fwd_mib=peak_memory(forward, device) / MIB,
        train_mib=peak_memory(train, device) / MIB,
        gflop=total / 1e9,
        attn_gflop=None if attn is None else attn / 1e9,
        analytic_gflop=None if analytic is None else analytic / 1e9,
        flop_ratio=ratio,
        memory_growth=setting.memory_growth,
        budget_mib=budget(setting.memory_growth, n, setting.dim, setting.heads, timing.batch) / MIB,
        state_bytes=state_bytes,
        state_why=state_why,
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


def measure_all(
    settings: Sequence[Setting], lengths: Sequence[int], timing: Timing, device: torch.device
) -> dict[str, list[Point]]:
    """Each setting's points (by its label), on `timing.threads` CPU threads and a fixed seed; the
    process's thread count is as before afterwards."""
    with _threads(timing.threads):
        torch.manual_seed(0)
        return {setting.label: series(setting, lengths, timing, device) for setting in settings}


@contextmanager
def _threads(count: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def series(setting: Setting, lengths: Sequence[int], timing: Timing, device: torch.device) -> list[Point]:
    """Measure `setting` at each N, stopping before an N whose train time or memory, extrapolated
    from the last points, would pass `timing.max_seconds` or `timing.max_mib`."""
    module = module_for(setting, max(lengths)).to(device).eval()  # eval: no dropout noise in the timings
    points: list[Point] = []
    for n in lengths:
        if points and (
            extrapolate(points, "train_ms", n) / 1e3 > timing.max_seconds
            or extrapolate(points, "train_mib", n) > timing.max_mib
        ):
            print(f"  {setting.label}: stopping before N={n} (--max-seconds / --max-mib)", file=sys.stderr)
            break
        points.append(measure(setting, module, n, timing, device))
        print(f"  {setting.label} N={n}: {points[-1].train_ms:.2f} ms fwd+bwd", file=sys.stderr)
    return points


def extrapolate(points: list[Point], field: str, n: int) -> float:
    """`field` at length n from the growth between the last two points, taken as between N¹ and N²
    (a single noisy pair must neither stall a linear row nor let a quadratic one run away)."""
    last = points[-1]
    k = 2.0
    if len(points) > 1:
        before = points[-2]
        k = math.log(max(getattr(last, field), 1e-9) / max(getattr(before, field), 1e-9)) / math.log(
            last.n / before.n
        )
    return getattr(last, field) * (n / last.n) ** min(max(k, 1.0), 2.0)


def growth_exponent(points: list[Point], field: str) -> float | None:
    """Least-squares slope of log(field) vs log(N) over the upper half of the N grid."""
    upper = points[len(points) // 2 :] if len(points) >= 4 else points
    if len(upper) < 2:
        return None
    xs = [math.log(p.n) for p in upper]
    ys = [math.log(max(getattr(p, field), 1e-9)) for p in upper]
    return statistics.linear_regression(xs, ys).slope
