"""`attnx bench`: what each attention mechanism costs as the sequence length N grows, asked for on the
command line and shown as tables, a CSV and plots. The rows are `attnx.bench.settings`; how each is
measured, `attnx.bench.points`.

Each selected mechanism/score (built-in or plugin) runs as self-attention over N positions of width d;
`--encoder` adds reference encoders over N tokens (rnn: the linear-time reference); `--lm` runs the lm
kind's whole decoder-only model with each named mechanism as its causal self-attention. `--causal` runs
the mechanisms under a causal mask (`Positions.self_attention(N, causal=True)`): `all` leaves out those
that declare none (one line says which), naming one of them is an error. A row whose fwd+bwd peak passes
its memory budget is flagged. Causal rows (`--causal`, `--lm`) show the bytes per sequence decoding keeps
after N tokens (`state B`); other rows say why they have none. Never imports Lightning.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from attnx import registry
from attnx.bench.points import Point, Timing, default_device, growth_exponent, measure_all
from attnx.bench.settings import (
    Setting,
    attention_class,
    attention_settings,
    budget_rule,
    encoder_settings,
    layers,
    lm_settings,
)
from attnx.cli import ArgumentParser
from attnx.config.compose import file_in_the_way
from attnx.table import cell, markdown_table

DEFAULT = Timing()  # the command line's defaults are the ones `attnx compare` measures with


def _names(value: str, kind: str, plans: bool = False) -> list[str]:
    """A comma list of registered names; "all" means every registered one. With `plans`, a name may be
    an lm plan of them, `sliding_window+linear`."""
    available = registry.available(kind)
    if value == "all":
        return available
    names = [v.strip() for v in value.split(",") if v.strip()]
    for name in names:
        for one in layers(name) if plans else [name]:
            registry.get(kind, one)  # unknown names fail here with did-you-mean
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


def settings(args: argparse.Namespace) -> list[Setting]:
    """Every (mechanism, score, d, heads), (lm, d, heads) and (encoder, d, heads) the arguments select."""
    found: list[Setting] = []
    if args.attention:
        names = _causal(args)
        scores = _names(args.score, "score") if args.score else None
        found += attention_settings(names, scores, args.dim, args.heads, args.causal)
    if args.lm:
        found += lm_settings(_names(args.lm, "attention", plans=True), args.dim, args.heads)
    encoders = [e.strip() for e in args.encoder.split(",") if e.strip()]
    return found + encoder_settings(encoders, args.dim, args.heads)


def _causal(args: argparse.Namespace) -> list[str]:
    """`--attention`'s mechanisms; under `--causal` only those that declare a causal mask. Naming one
    that declares none is an error; `all` leaves them out, said in one line."""
    names = _names(args.attention, "attention")
    if not args.causal:
        return names
    acausal = [name for name in names if not attention_class(name).causal]
    if acausal and args.attention != "all":
        raise ValueError(f"--causal: no causal mask in {', '.join(acausal)}; leave them out of --attention")
    if acausal:
        print(f"attnx bench: --causal leaves out {', '.join(acausal)}: no causal mask", file=sys.stderr)
    return [name for name in names if name not in acausal]


def table(points: list[Point]) -> str:
    header = ["case", "N", "fwd ms", "train ms", "fwd MiB", "train MiB", "state B", "GFLOP", "attn"]
    header += ["4N²d", "ratio"]
    rows = [
        [
            p.label,
            p.n,
            p.fwd_ms,
            p.train_ms,
            p.fwd_mib,
            p.train_mib,
            f"— {p.state_why}" if p.state_bytes is None else p.state_bytes,
            cell(p.gflop, 4),
            cell(p.attn_gflop, 4),
            cell(p.analytic_gflop, 4),
            p.flop_ratio,
        ]
        for p in points
    ]
    return markdown_table(header, rows, right_from=1)


def growth_table(by_setting: dict[str, list[Point]]) -> str:
    header = ["case", "N range", "time ~ N^k (fwd)", "(fwd+bwd)", "memory ~ N^k (fwd+bwd)"]
    rows = [
        [
            label,
            f"{points[0].n}-{points[-1].n}" if points else "-",
            growth_exponent(points, "fwd_ms"),
            growth_exponent(points, "train_ms"),
            growth_exponent(points, "train_mib"),
        ]
        for label, points in by_setting.items()
    ]
    return markdown_table(header, rows, right_from=1)


def over_budget(points: list[Point]) -> bool:
    """Whether a row's fwd+bwd peak at its largest N passes its budget."""
    return points[-1].train_mib > points[-1].budget_mib


def budget_table(by_setting: dict[str, list[Point]]) -> str:
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
        for label, points in by_setting.items()
        if points
    ]
    return markdown_table(header, rows, right_from=1)


def write_csv(path: Path, points: list[Point]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(points[0])))
        writer.writeheader()
        writer.writerows(asdict(p) for p in points)


def plot(path: Path, by_setting: dict[str, list[Point]], fields: tuple[str, str], ylabel: str) -> None:
    """Log-log plot of two fields (forward, forward+backward) against N, one line per case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, field, title in zip(axes, fields, ("forward", "forward + backward")):
        for label, points in by_setting.items():
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


def parser() -> ArgumentParser:
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
        "model (the lm kind: one block, embedding and head) over N tokens; a plan, a+b, one block each",
    )
    p.add_argument("--lengths", type=_ints, default=[64, 128, 256, 512, 1024, 2048, 4096], help="N grid")
    p.add_argument("--dim", type=_ints, default=[64], help="model widths d, comma-separated")
    p.add_argument("--heads", type=_ints, default=[4], help="head counts for mechanisms with heads")
    p.add_argument(
        "--causal",
        action="store_true",
        help="causal self-attention (mechanisms without a causal mask left out)",
    )
    p.add_argument("--batch", type=_positive, default=DEFAULT.batch)
    p.add_argument(
        "--repeats", type=_positive, default=DEFAULT.repeats, help="timed calls per point (median)"
    )
    p.add_argument("--warmup", type=_non_negative, default=DEFAULT.warmup, help="untimed calls before timing")
    p.add_argument(
        "--max-seconds",
        type=_positive_float,
        default=DEFAULT.max_seconds,
        help="largest fwd+bwd step a row grows into",
    )
    p.add_argument(
        "--max-mib",
        type=_positive_float,
        default=DEFAULT.max_mib,
        help="largest fwd+bwd peak memory a row grows into",
    )
    # 1 as in train.yaml: on a few shared cores a second thread mostly waits for the busy one
    p.add_argument("--threads", type=_positive, default=DEFAULT.threads, help="torch CPU threads (default 1)")
    p.add_argument("--device", type=_device, default=default_device())
    p.add_argument("--out", type=Path, default=Path("outputs/bench"), help="folder for CSV and plots")
    for option, role in (
        ("--score", "picks the scores of --attention's mechanisms"),
        ("--causal", "masks --attention's mechanisms (--lm's always are)"),
    ):
        p.needs(option, role, "--attention NAMES", lambda args: bool(args.attention))
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        selected = settings(args)
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
    timing = Timing(args.batch, args.repeats, args.warmup, args.max_seconds, args.max_mib, args.threads)
    print(
        f"attnx bench: {len(selected)} cases, N in {args.lengths}, batch {args.batch}, "
        f"{args.threads} threads on {device}",
        file=sys.stderr,
    )
    by_setting = measure_all(selected, args.lengths, timing, device)
    points = [p for series in by_setting.values() for p in series]
    print(table(points))
    print()
    print(growth_table(by_setting))
    print()
    print(budget_table(by_setting))
    for label, series in by_setting.items():
        if series and over_budget(series):
            print(f"attnx bench: {label} exceeds its memory budget at N={series[-1].n}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "bench.csv", points)
    plot(args.out / "time.png", by_setting, ("fwd_ms", "train_ms"), "time per call (ms)")
    plot(args.out / "memory.png", by_setting, ("fwd_mib", "train_mib"), "peak tensor memory (MiB)")
    print(f"\nwrote {args.out / 'bench.csv'}, time.png, memory.png")
    return 0
