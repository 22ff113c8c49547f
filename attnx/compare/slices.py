"""The compare report's test slices: each suite task's arms ranked at every test length, and their curves.

A task run with `task.test_slices` (`attnx.tasks.base`) reports its metric in distribution (`test/`, the
headline, shown as 1×) and on each slice of sequences up to k times the longest training length
(`test@{k}x/`). A ranking by the headline alone says nothing of length generalisation, and one over all
lengths pooled mixes the two questions, so each multiple gets its own ranking: mean over seeds and rank 1
= best, in a table per task, and one figure per task of the metric against the multiple, a line per arm
with its 95% seed interval (`attnx.report.stats.summarize`), the extrapolation curves of Anil et al.
(2022, "Exploring Length Generalization in Large Language Models").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from attnx.report import stats
from attnx.report.document import Image, Section, Table, slug
from attnx.report.figures import DPI
from attnx.report.runs import Row, slice_multiples, text


def slices_section(
    rows: list[Row], task_metrics: dict[str, str], out: Path, highlight: Any = None, higher: bool = True
) -> Section | None:
    """A table and a figure per task whose runs have slice metrics; None when no task has any. `rows`
    are (task, mechanism) configurations (their `values`), `task_metrics` each task's `test/` metric
    (`higher` or lower being better), the figures go to `out`, and the `highlight` arm (the candidate) is
    drawn thicker."""
    parts: list[str | Table | Image] = []
    for task, metric in task_metrics.items():
        arms = {row.values[1]: row for row in rows if row.values[0] == task}
        multiples = slice_multiples([run for row in arms.values() for run in row.runs], metric)
        if not multiples:
            continue
        columns = {1: metric, **{k: metric.replace("test/", f"test@{k}x/", 1) for k in multiples}}
        found = {arm: _summaries(row, columns) for arm, row in arms.items()}
        parts.append(_table(task, metric, found, not higher))
        parts.append(_figure(task, metric, found, out, highlight))
    if not parts:
        return None
    note = (
        "Each task's metric on its in-distribution test split (1×) and on each test slice `test@kx`: "
        "sources longer than any seen in training, up to k × the longest training length. Mean over seeds "
        "and rank (1 = best) at each multiple; n/a: no run has it. Figures: the mean against the multiple, "
        "a line per mechanism with its 95% bootstrap interval over seeds."
    )
    return Section("Length generalisation", [note, *parts])


def _summaries(row: Row, columns: dict[int, str]) -> dict[int, stats.Summary]:
    """Multiple -> the arm's summary over seeds of that column's metric, where some run has it."""
    return {k: stats.summarize(found) for k, name in columns.items() if (found := row.found(name))}


def _table(task: str, metric: str, found: dict[Any, dict[int, stats.Summary]], lower: bool) -> Table:
    multiples = sorted({k for per_arm in found.values() for k in per_arm})
    rank = {k: _ranks({arm: s[k].mean for arm, s in found.items() if k in s}, lower) for k in multiples}
    header = [f"{task}: mechanism"]
    for k in multiples:
        header += [f"{k}× {metric.removeprefix('test/')}", f"{k}× rank"]
    order = sorted(found, key=lambda arm: rank[1].get(arm, len(found) + 1))  # by the headline's rank
    body = []
    for arm in order:
        cells = []
        for k in multiples:
            s = found[arm].get(k)
            cells += ["n/a", "–"] if s is None else [f"{s.mean:.3f}", str(rank[k][arm])]
        body.append([text(arm), *cells])
    return Table(header, body, right_from=1, id=f"slices-{slug(task)}")


def _ranks(means: dict[Any, float], lower: bool) -> dict[Any, int]:
    """Competition ranks (1 = best; equal means share the better rank)."""
    signed = {arm: (m if lower else -m) for arm, m in means.items()}
    return {arm: 1 + sum(other < m for other in signed.values()) for arm, m in signed.items()}


def _figure(
    task: str, metric: str, found: dict[Any, dict[int, stats.Summary]], out: Path, highlight: Any
) -> Image:
    figure = Figure(figsize=(6, 3.6), layout="constrained")
    ax = figure.add_subplot()
    for i, (arm, per_k) in enumerate(found.items()):
        ks = sorted(per_k)
        errors = [_below_above(per_k[k]) for k in ks]
        ax.errorbar(
            ks,
            [per_k[k].mean for k in ks],
            yerr=[[e[0] for e in errors], [e[1] for e in errors]],
            marker="*" if arm == highlight else "o",
            linewidth=2.2 if arm == highlight else 1.2,
            capsize=3,
            color=f"C{i % 10}",
            label=text(arm),
        )
    multiples = sorted({k for per_k in found.values() for k in per_k})
    ax.set_xscale("log", base=2)
    ax.set_xticks(multiples, [f"{k}×" for k in multiples])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("test length, as a multiple of the longest training length")
    ax.set_ylabel(metric.removeprefix("test/"))
    ax.set_title(task, fontsize=9)
    ax.grid(alpha=0.3)
    figure.legend(loc="outside right upper", fontsize=7, title="mechanism", title_fontsize=7)
    path = out / f"slices_{slug(task)}.png"
    figure.savefig(path, dpi=DPI)
    return Image(path, f"{task}: {metric.removeprefix('test/')} against test length")


def _below_above(s: stats.Summary) -> tuple[float, float]:
    """The seed interval as distances below and above the mean (none for a single seed)."""
    return (0.0, 0.0) if s.ci is None else (s.mean - s.ci[0], s.ci[1] - s.mean)
