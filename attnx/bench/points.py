"""What `attnx bench` measures of each row (`attnx.bench.settings.Setting`): one `Point` per sequence
length N. A function of plain data, so that `attnx compare` takes its timings from here as values, and
`attnx.bench.cli` is only how they are asked for and shown. Per point:

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
where fixed per-call costs no longer dominate. A row stops growing before an N whose time or memory,
extrapolated from its last points, would pass the run's limits (`Timing`). Never imports Lightning.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from attnx.bench.measure import count_flops, median_time, peak_memory
from attnx.bench.settings import VOCAB, Setting, attention_class, budget, module_for
from attnx.nn.attention import Attention
from attnx.nn.positions import Positions
from attnx.nn.transformer import AttentionSite, KVCache
from attnx.vocab import SPECIALS

MIB = 2**20


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


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


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
    token after n tokens (an lm row's: every block's site, a plan's each of its own), or (None, why not)."""
    if setting.kind == "encoder":
        return None, "an encoder"
    if not setting.causal:
        causal = attention_class(setting.name).causal
        return None, "not a causal row (--causal)" if causal else "no causal mask"
    sites = (
        [module]
        if isinstance(module, Attention)
        else [m.mechanism for m in module.modules() if isinstance(m, AttentionSite)]
    )
    sizes = [KVCache.state_size(mechanism, n) for mechanism in sites]  # an lm row's: each block's, summed
    undeclared = next((m for m, size in zip(sites, sizes) if size is None), None)
    if undeclared is not None:
        return None, f"{type(undeclared).__name__}.state_size undeclared"
    numbers = next(sites[0].parameters(), torch.empty(()))  # the dtype its cache is kept in
    return sum(size or 0 for size in sizes) * numbers.element_size(), ""


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
