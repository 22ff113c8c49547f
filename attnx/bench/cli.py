"""`attnx bench`: what each attention mechanism costs as the sequence length N grows.

Each selected mechanism/score (built-in or plugin) runs as self-attention over N positions of
width d: queries, keys and values are the same [batch, N, d] states, as in a Transformer layer (a
mechanism's `memory()` decides what it attends to: `fixed_c` reads one summary slot). Encoders run
over N tokens; the rnn encoder is the linear-time reference. Per point it measures

  fwd      inference forward (no autograd), median of --repeats after --warmup
  train    forward + backward, same statistics; parameter gradients are freshly allocated each time
  memory   peak tensor memory of each, above what was allocated before (see attnx.bench.measure.peak_memory)
  FLOPs    of the forward, counted by torch.utils.flop_counter.FlopCounterMode (matrix products only)

and compares the counted attention FLOPs (all of the mechanism's FLOPs but its own input/output
projections, i.e. the Linear layers directly inside it) with the analytic cost of self-attention
from the lecture notes: 2·N²·d for QKᵀ plus 2·N²·d for weights·V per head of width d, times batch
and heads, i.e. 4·N²·d_model·batch. The growth exponent k of time ~ N^k is fitted on the upper half
of each row's N grid, where fixed per-call costs no longer dominate. `--causal` runs the mechanisms
under a causal mask (`Positions.self_attention(N, causal=True)`): `all` leaves out those that declare
none (one line says which), naming one of them is an error.
`--lm` runs the lm kind's whole decoder-only model (embedding, one block whose causal self-attention
is each named mechanism, the next-token head) over N tokens, as the encoder rows run encoders.

Each row has a memory budget at its largest N, from the growth its mechanism declares
(`Attention.memory_growth`; the rnn encoder is linear, the self_attn one quadratic): LINEAR_FLOATS
float32 numbers per token and channel, N·d·batch of them, plus for a quadratic row QUADRATIC_FLOATS N×N
matrices per head. A row whose fwd+bwd peak passes its budget is flagged. Never imports Lightning.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnx import registry
from attnx.bench.measure import count_flops, median_time, peak_memory
from attnx.cli import ArgumentParser
from attnx.config.compose import file_in_the_way
from attnx.models.build import build_host, build_model, score_factory
from attnx.nn.positions import Positions
from attnx.table import cell, markdown_table
from attnx.vocab import SPECIALS

VOCAB = 100  # token ids for the encoder rows; the embedding size barely matters
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
class Case:
    """One row of the benchmark: a module at one width (and head count, where it has heads)."""

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
        return registry.get("attention", self.name).memory_growth


@dataclass
class Point:
    """The measurements of one case at one N (times in ms, memory in MiB, FLOPs in GFLOP)."""

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


def _names(value: str, kind: str) -> list[str]:
    """A comma list of registered names; "all" means every registered one."""
    available = registry.available(kind)
    if value == "all":
        return available
    names = [v.strip() for v in value.split(",") if v.strip()]
    for name in names:
        registry.get(kind, name)  # unknown names fail here with did-you-mean
    return names


def _ints(value: str) -> list[int]:
    try:
        numbers = [int(v) for v in value.split(",") if v.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from error
    if not numbers or min(numbers) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {value!r}")
    return numbers


def _positive(value: str) -> int:
    numbers = _ints(value)
    if len(numbers) != 1:
        raise argparse.ArgumentTypeError(f"expected one positive integer, got {value!r}")
    return numbers[0]


def _non_negative(value: str) -> int:
    if not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value!r}")
    return int(value)


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}") from error
    if not number > 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}")
    return number


def _device(value: str) -> str:
    """A torch device this machine has: the CPU, or the available accelerator (CUDA, MPS, ...)."""
    try:
        kind = torch.device(value).type
    except RuntimeError as error:
        raise argparse.ArgumentTypeError(f"not a torch device: {value!r}") from error
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    available = ["cpu", *([accelerator.type] if accelerator else [])]
    if kind not in available:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not available here; available: {', '.join(available)}"
        )
    return value


def cases(args: argparse.Namespace) -> list[Case]:
    """Every (mechanism, score, d, heads) and (encoder, d, heads) the arguments select."""
    found: list[Case] = []
    for name in _causal(args) if args.attention else []:
        cls = registry.get("attention", name)
        if cls.default_score is None:
            scores: list[str | None] = [None]
        else:
            scores = list(_names(args.score, "score")) if args.score else [cls.default_score]
        has_heads = "num_heads" in registry.registry("attention").entry(name).hyperparams()
        for score in scores:
            found += [Case("attention", name, score, d, h, args.causal) for d, h in _widths(args, has_heads)]
    for name in _names(args.lm, "attention") if args.lm else []:
        if not registry.get("attention", name).causal:
            raise ValueError(
                f"--lm {name}: it declares no causal mask, so it cannot be an lm's self-attention"
            )
        has_heads = "num_heads" in registry.registry("attention").entry(name).hyperparams()
        found += [Case("lm", name, None, d, h, causal=True) for d, h in _widths(args, has_heads)]
    for name in (e.strip() for e in args.encoder.split(",") if e.strip()):
        if name not in ENCODERS:
            raise ValueError(f"--encoder must name some of {', '.join(ENCODERS)}; got {name!r}")
        found += [Case("encoder", name, None, d, h) for d, h in _widths(args, ENCODER_HEADS[name])]
    return found


def _causal(args: argparse.Namespace) -> list[str]:
    """`--attention`'s mechanisms; under `--causal` only those that declare a causal mask. Naming one
    that declares none is an error; `all` leaves them out, said in one line."""
    names = _names(args.attention, "attention")
    if not args.causal:
        return names
    acausal = [name for name in names if not registry.get("attention", name).causal]
    if acausal and args.attention != "all":
        raise ValueError(f"--causal: no causal mask in {', '.join(acausal)}; leave them out of --attention")
    if acausal:
        print(f"attnx bench: --causal leaves out {', '.join(acausal)}: no causal mask", file=sys.stderr)
    return [name for name in names if name not in acausal]


def _widths(args: argparse.Namespace, has_heads: bool) -> list[tuple[int, int | None]]:
    if not has_heads:
        return [(d, None) for d in args.dim]
    for d in args.dim:
        for h in args.heads:
            if d % h:
                raise ValueError(f"--heads must divide --dim; got d={d}, heads={h}")
    return [(d, h) for d in args.dim for h in args.heads]


def build(case: Case, max_len: int) -> nn.Module:
    if case.kind == "encoder":
        params = ENCODERS[case.name](case.dim, case.heads, max_len)
        return build_host("encoder", {"name": case.name, **params}, vocab_size=VOCAB)
    hyper = {} if case.heads is None else {"num_heads": case.heads}
    if case.kind == "lm":
        lm = {"d_model": case.dim, "num_layers": 1, "ff_dim": 2 * case.dim, "dropout": 0.0}
        lm |= {"positions": "sinusoidal", "max_len": max_len}
        return build_model("lm", VOCAB, None, {"name": case.name, **hyper}, None, {}, lm=lm)
    factory = None if case.score is None else score_factory({"name": case.score})
    d = case.dim
    return registry.build(
        "attention", {"name": case.name, **hyper}, query_dim=d, key_dim=d, value_dim=d, score=factory
    )


def workload(
    module: nn.Module, case: Case, n: int, batch: int, device: torch.device
) -> tuple[Callable[[], None], Callable[[], None]]:
    """(inference forward, forward + backward) of `module` on fixed random inputs of length n."""
    if case.kind in ("encoder", "lm"):
        tokens = torch.randint(len(SPECIALS), VOCAB, (batch, n), device=device)
        lengths = torch.full((batch,), n, device=device)
        inputs: list[torch.Tensor] = []

        def run() -> torch.Tensor:
            return module(tokens, lengths).states if case.kind == "encoder" else module(tokens, lengths)[0]

    else:
        x = torch.randn(batch, n, case.dim, device=device, requires_grad=True)
        mask = torch.ones(batch, n, dtype=torch.bool, device=device)
        inputs = [x]

        def run() -> torch.Tensor:
            keys, values, memory_mask = module.memory(x, x.mean(1), mask)
            at = Positions(Positions.span(n, device), Positions.span(keys.size(1), device), case.causal)
            return module(x, keys, values, memory_mask, need_weights=False, positions=at)[0]

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


def measure(case: Case, module: nn.Module, n: int, args: argparse.Namespace, device: torch.device) -> Point:
    forward, train = workload(module, case, n, args.batch, device)
    flops = count_flops(forward)
    total = flops.get("Global", 0)
    attn = analytic = ratio = None
    if case.kind == "attention":
        root = type(module).__name__
        projections = sum(
            flops.get(f"{root}.{child}", 0)
            for child, layer in module.named_children()
            if isinstance(layer, nn.Linear)
        )
        attn = total - projections
        analytic = 4 * n * n * case.dim * args.batch  # 2·N²·d_h (QKᵀ) + 2·N²·d_h (a·V), × heads × batch
        ratio = attn / analytic
    return Point(
        label=case.label,
        kind=case.kind,
        name=case.name,
        score=case.score,
        dim=case.dim,
        heads=case.heads,
        causal=case.causal,
        n=n,
        batch=args.batch,
        threads=torch.get_num_threads(),
        device=str(device),
        fwd_ms=median_time(forward, device, args.repeats, args.warmup) * 1e3,
        train_ms=median_time(train, device, args.repeats, args.warmup) * 1e3,
        fwd_mib=peak_memory(forward, device) / MIB,
        train_mib=peak_memory(train, device) / MIB,
        gflop=total / 1e9,
        attn_gflop=None if attn is None else attn / 1e9,
        analytic_gflop=None if analytic is None else analytic / 1e9,
        flop_ratio=ratio,
        memory_growth=case.memory_growth,
        budget_mib=budget(case.memory_growth, n, case.dim, case.heads, args.batch) / MIB,
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


def run_case(case: Case, args: argparse.Namespace, device: torch.device) -> list[Point]:
    """Measure `case` at each N, stopping before an N whose train time or memory, extrapolated
    from the last points, would pass --max-seconds or --max-mib."""
    module = build(case, max(args.lengths)).to(device).eval()  # eval: no dropout noise in the timings
    points: list[Point] = []
    for n in args.lengths:
        if points and (
            extrapolate(points, "train_ms", n) / 1e3 > args.max_seconds
            or extrapolate(points, "train_mib", n) > args.max_mib
        ):
            print(f"  {case.label}: stopping before N={n} (--max-seconds / --max-mib)", file=sys.stderr)
            break
        points.append(measure(case, module, n, args, device))
        print(f"  {case.label} N={n}: {points[-1].train_ms:.2f} ms fwd+bwd", file=sys.stderr)
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


def table(points: list[Point]) -> str:
    header = ["case", "N", "fwd ms", "train ms", "fwd MiB", "train MiB", "GFLOP", "attn", "4N²d", "ratio"]
    rows = [
        [
            p.label,
            p.n,
            p.fwd_ms,
            p.train_ms,
            p.fwd_mib,
            p.train_mib,
            cell(p.gflop, 4),
            cell(p.attn_gflop, 4),
            cell(p.analytic_gflop, 4),
            p.flop_ratio,
        ]
        for p in points
    ]
    return markdown_table(header, rows, right_from=1)


def growth_table(by_case: dict[str, list[Point]]) -> str:
    header = ["case", "N range", "time ~ N^k (fwd)", "(fwd+bwd)", "memory ~ N^k (fwd+bwd)"]
    rows = [
        [
            label,
            f"{points[0].n}-{points[-1].n}" if points else "-",
            growth_exponent(points, "fwd_ms"),
            growth_exponent(points, "train_ms"),
            growth_exponent(points, "train_mib"),
        ]
        for label, points in by_case.items()
    ]
    return markdown_table(header, rows, right_from=1)


def over_budget(points: list[Point]) -> bool:
    """Whether a row's fwd+bwd peak at its largest N passes its budget."""
    return points[-1].train_mib > points[-1].budget_mib


def budget_table(by_case: dict[str, list[Point]]) -> str:
    """Per row at its largest N: the fwd+bwd peak next to its budget and whether it holds."""
    header = ["case", "N", "fwd+bwd MiB", "budget MiB", "budget (floats)", "holds"]
    rows = [
        [
            label,
            points[-1].n,
            points[-1].train_mib,
            points[-1].budget_mib,
            budget_rule(points[-1].memory_growth),
            "**OVER BUDGET**" if over_budget(points) else "yes",
        ]
        for label, points in by_case.items()
        if points
    ]
    return markdown_table(header, rows, right_from=1)


def write_csv(path: Path, points: list[Point]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(points[0])))
        writer.writeheader()
        writer.writerows(asdict(p) for p in points)


def plot(path: Path, by_case: dict[str, list[Point]], fields: tuple[str, str], ylabel: str) -> None:
    """Log-log plot of two fields (forward, forward+backward) against N, one line per case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, field, title in zip(axes, fields, ("forward", "forward + backward")):
        for label, points in by_case.items():
            if not points:
                continue
            k = growth_exponent(points, field)
            suffix = f" (N^{k:.2f})" if k is not None else ""
            ax.loglog([p.n for p in points], [getattr(p, field) for p in points], "o-", label=label + suffix)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="attnx bench",
        description="Time, peak memory and FLOPs of attention mechanisms as self-attention vs sequence "
        "length N, with FLOPs compared to the analytic 4·N²·d and fitted growth exponents.",
    )
    p.add_argument("--attention", default="all", help="mechanisms, comma-separated, or 'all' (default)")
    p.add_argument(
        "--score", help="scores for mechanisms that take one, comma-separated, or 'all' (default: their own)"
    )
    p.add_argument("--encoder", default="rnn", help="reference encoders: rnn, self_attn, or '' for none")
    p.add_argument(
        "--lm",
        help="mechanisms, comma-separated or 'all', each as the causal self-attention of a decoder-only "
        "model (the lm kind: one block, embedding and head) over N tokens",
    )
    p.add_argument("--lengths", type=_ints, default=[64, 128, 256, 512, 1024, 2048, 4096], help="N grid")
    p.add_argument("--dim", type=_ints, default=[64], help="model widths d, comma-separated")
    p.add_argument("--heads", type=_ints, default=[4], help="head counts for mechanisms with heads")
    p.add_argument(
        "--causal",
        action="store_true",
        help="causal self-attention (mechanisms without a causal mask left out)",
    )
    p.add_argument("--batch", type=_positive, default=4)
    p.add_argument("--repeats", type=_positive, default=5, help="timed calls per point (median)")
    p.add_argument("--warmup", type=_non_negative, default=2, help="untimed calls before timing")
    p.add_argument(
        "--max-seconds", type=_positive_float, default=1.0, help="largest fwd+bwd step a row grows into"
    )
    p.add_argument(
        "--max-mib", type=_positive_float, default=2048, help="largest fwd+bwd peak memory a row grows into"
    )
    # 1 as in train.yaml: on a few shared cores a second thread mostly waits for the busy one
    p.add_argument("--threads", type=_positive, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--device", type=_device, default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", type=Path, default=Path("outputs/bench"), help="folder for CSV and plots")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(args.threads)
    try:
        selected = cases(args)
    except (ValueError, registry.PluginImportError) as error:
        print(f"attnx bench: {error}", file=sys.stderr)
        return 2
    if not selected:
        print("attnx bench: nothing selected (--attention, --encoder and --lm are empty)", file=sys.stderr)
        return 2
    blocked = file_in_the_way(args.out)
    if blocked is not None:  # said before the measuring, not after it
        print(f"attnx bench: --out {args.out}: {blocked} is a file, not a folder", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    torch.manual_seed(0)
    print(
        f"attnx bench: {len(selected)} cases, N in {args.lengths}, batch {args.batch}, "
        f"{torch.get_num_threads()} threads on {device}",
        file=sys.stderr,
    )
    by_case = {case.label: run_case(case, args, device) for case in selected}
    points = [p for series in by_case.values() for p in series]
    print(table(points))
    print()
    print(growth_table(by_case))
    print()
    print(budget_table(by_case))
    for label, series in by_case.items():
        if series and over_budget(series):
            print(f"attnx bench: {label} exceeds its memory budget at N={series[-1].n}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "bench.csv", points)
    plot(args.out / "time.png", by_case, ("fwd_ms", "train_ms"), "time per call (ms)")
    plot(args.out / "memory.png", by_case, ("fwd_mib", "train_mib"), "peak tensor memory (MiB)")
    print(f"\nwrote {args.out / 'bench.csv'}, time.png, memory.png")
    return 0
