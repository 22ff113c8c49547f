"""The figures of a report, drawn with matplotlib's object API (no pyplot state, no display):

- `line_plot`: a metric against a swept numeric key, one line per configuration (± std bars); a
  learning-rate sweep on a log axis, which is how its sensitivity curve reads.
- `length_plot`: exact match against source length from each run's `by_length`, one panel per cell,
  a line per compared value, the training lengths shaded.
- `curve_plot`: each run's validation curve of its judged metric (results.json's `curve`, the metric its
  `convergence` names) against training step, averaged over seeds, one panel per cell, a line per
  compared value, the values with a run still improving dashed.
- `state_plot`: quality against decoding state bytes (Zoology's recall-against-state figure), a line per
  value of the compared key through its configurations (widths, windows), one panel per task and `--panel`
  value, each panel's frontier dashed.
- `pareto_plot`: quality against three costs (parameters, training seconds, and inference ms at a fixed
  N or decoding state bytes per sequence: whichever the points have), the Pareto frontier drawn through
  the configurations no other beats on both axes.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from attnx.report.document import slug
from attnx.report.runs import Row, sort_key, text, value
from attnx.report.significance import Cells

DPI = 110


def line_plot(
    rows: list[Row],
    columns: list[str],
    metric: str,
    x: str,
    out: Path,
    panels: list[str] | None = None,
    tuned: str | None = None,
    name: str | None = None,
) -> Path | None:
    """`metric` against `x`, one line per configuration of the other columns, ± std as error bars; with
    `panels` (config keys), one panel per combination of their values. Lines are named by the columns
    that tell them apart within a panel, never by `tuned` (the key `--select` chose per row)."""
    xi = columns.index(x)
    others = [c for c in columns if c not in (x, tuned, *(panels or []))]
    points = []
    for row in rows:  # sorted, so lines come in table order and points by x
        mean = row.mean(metric)
        if mean is not None and row.values[xi] is not None:
            panel = tuple(value(row.runs[0], p) for p in panels or [])
            points.append(
                (panel, dict(zip(columns, row.values)), (row.values[xi], mean, row.std(metric) or 0.0))
            )
    if not points:
        return None
    # a column constant inside every panel (the cell's name when panels are its fields) tells no lines apart
    varying = [
        c
        for c in others
        if len({(pn, sort_key(named[c])) for pn, named, _ in points}) > len({pn for pn, _, _ in points})
    ]
    grid: dict[tuple[Any, ...], dict[str, list[tuple[Any, float, float]]]] = {}
    for panel, named, point in points:
        label = ", ".join(f"{c}={text(named[c])}" for c in varying) or metric
        grid.setdefault(panel, {}).setdefault(label, []).append(point)
    labels = list(dict.fromkeys(label for lines in grid.values() for label in lines))
    figure, axes = _panels(len(grid), labels)
    colours = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    xs = [p[2][0] for p in points]
    logarithmic = min(xs) > 0 and max(xs) / min(xs) >= 10  # a learning-rate grid spans decades
    for ax, panel in zip(axes, sorted(grid, key=lambda values: tuple(map(sort_key, values)))):
        for label, series in grid[panel].items():
            ax.errorbar(
                *zip(*sorted(series, key=lambda p: p[0])),
                marker="o",
                capsize=3,
                color=colours[label],
                label=label if ax is axes[0] else None,
            )
        if logarithmic:
            ax.set_xscale("log")
        ax.set_xlabel(x)
        ax.set_title(", ".join(f"{p}={text(v)}" for p, v in zip(panels or [], panel)), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(metric)
    if len(labels) > 1:
        figure.legend(loc="outside right upper", fontsize=7)
    path = out / (name or f"{slug(metric)}_vs_{slug(x)}.png")
    figure.savefig(path, dpi=DPI)
    return path


def length_plot(grouped: Cells, metric: str, out: Path, highlight: Any = None) -> Path | None:
    """Mean `metric` (a key of the runs' `by_length`) against source length, one panel per cell that
    has it, a line per value of the compared key; the lengths the cell trained on shaded."""
    panels = []
    for cell, by_value in grouped.rows.items():
        lines = {v: _mean_by_length(row, metric) for v, row in by_value.items()}
        lines = {v: series for v, series in lines.items() if series}
        if lines:
            panels.append((cell, lines, next(iter(by_value.values())).runs[0]))
    if not panels:
        return None
    labels = [text(v) for v in grouped.values() if any(v in lines for _, lines, _ in panels)]
    figure, axes = _panels(len(panels), labels)
    colours = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    for ax, (cell, lines, run) in zip(axes, panels):
        trained = (value(run, "task.min_len"), value(run, "task.max_len"))
        if all(isinstance(n, int) for n in trained):
            ax.axvspan(trained[0] - 0.5, trained[1] + 0.5, color="0.92", zorder=0, label=None)
            ax.text(trained[0] - 0.4, 0.02, "training lengths", fontsize=7, color="0.4")
        for v, series in lines.items():
            lengths = sorted(series)
            _line(ax, lengths, [series[n] for n in lengths], text(v), v == highlight, colours, ax is axes[0])
        ax.set_xlabel("source length")
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(grouped.label(cell), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(metric)
    figure.legend(loc="outside right upper", fontsize=7, title=grouped.key, title_fontsize=7)
    path = out / f"{slug(metric)}_vs_length.png"
    figure.savefig(path, dpi=DPI)
    return path


def _line(
    ax: Any,
    xs: list[Any],
    ys: list[float],
    label: str,
    highlighted: bool,
    colours: dict[str, str],
    legend: bool,
    markersize: float = 4,
    linestyle: str = "-",
) -> None:
    """One value's line in a panel: the highlighted one (a compare's candidate) a large star."""
    ax.plot(
        xs,
        ys,
        marker="*" if highlighted else "o",
        markersize=8 if highlighted else markersize,
        linewidth=2.2 if highlighted else 1.2,
        linestyle=linestyle,
        color=colours[label],
        label=label if legend else None,
    )


def curve_plot(grouped: Cells, out: Path, highlight: Any = None) -> Path | None:
    """Per cell, a line per value of the compared key: the mean over seeds of the runs' validation curve
    of the metric their verdict judged, dashed when any of the runs behind it was still improving."""
    panels = []
    for cell, by_value in grouped.rows.items():
        lines = {v: _mean_curve(row) for v, row in by_value.items()}
        lines = {v: line for v, line in lines.items() if line[1]}
        if lines:
            panels.append((cell, lines))
    if not panels:
        return None
    labels = [text(v) for v in grouped.values() if any(v in lines for _, lines in panels)]
    figure, axes = _panels(len(panels), labels)
    colours = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    for ax, (cell, lines) in zip(axes, panels):
        for v, (_, series, improving) in lines.items():
            steps = sorted(series)
            dashed = "--" if improving else "-"
            _line(
                ax,
                steps,
                [series[n] for n in steps],
                text(v),
                v == highlight,
                colours,
                ax is axes[0],
                2.5,
                dashed,
            )
        metric = next(iter(lines.values()))[0]  # a cell's runs share a task, so the metric judged
        ax.set_xlabel("training step")
        ax.set_title(f"{grouped.label(cell)}: {metric}", fontsize=9)
        ax.grid(alpha=0.3)
    figure.suptitle("validation curves (dashed: a run still improving at its last validation)", fontsize=9)
    figure.legend(loc="outside right upper", fontsize=7, title=grouped.key, title_fontsize=7)
    path = out / "validation_curves.png"
    figure.savefig(path, dpi=DPI)
    return path


def _mean_curve(row: Row) -> tuple[str, dict[int, float], bool]:
    """(the judged metric, its value per step averaged over the runs that validated at that step,
    whether any run was still improving) for a row whose runs recorded a curve and a verdict."""
    judged = [
        r for r in row.runs if isinstance(r.get("convergence"), dict) and isinstance(r.get("curve"), dict)
    ]
    if not judged:
        return "", {}, False
    metric = str(judged[0]["convergence"].get("metric"))
    at: dict[int, list[float]] = {}
    for run in judged:
        for step, v in run["curve"].get(metric, []):
            at.setdefault(int(step), []).append(float(v))
    improving = any(r["convergence"].get("converged") is False for r in judged)
    return metric, {step: statistics.fmean(vs) for step, vs in at.items()}, improving


def _mean_by_length(row: Row, metric: str) -> dict[int, float]:
    """The runs' `by_length[metric]`, averaged over seeds at each length all of them have."""
    curves = [run.get("by_length", {}).get(metric) for run in row.runs]
    curves = [{int(n): v for n, v in curve.items()} for curve in curves if curve]
    if not curves:
        return {}
    common = set.intersection(*(set(curve) for curve in curves))
    return {n: statistics.fmean(curve[n] for curve in curves) for n in common}


# (label, unit) of each cost axis, and how a row's cost is read: from its runs, or from `attnx bench`
COSTS: tuple[tuple[str, str], ...] = (
    ("params", "parameters"),
    ("train_seconds", "training seconds"),
    ("infer_ms", "inference ms"),
    ("state_bytes", "decoding state bytes per sequence"),
)


def pareto_plot(
    cell: str,
    points: Sequence[tuple[str, float, dict[str, float | None]]],
    metric: str,
    out: Path,
    highlight: str | None = None,
    infer_label: str = "inference ms",
    higher: bool = True,
) -> Path | None:
    """One cell's configurations (label, quality, {cost: value}), quality against each cost in a panel;
    the frontier joins the points no other point beats on both axes (cheaper and better: `higher`
    quality, or lower)."""
    axes_costs = [(key, infer_label if key == "infer_ms" else unit) for key, unit in COSTS]
    axes_costs = [(k, u) for k, u in axes_costs if any(c.get(k) is not None for _, _, c in points)]
    if not points or not axes_costs:
        return None
    figure = Figure(figsize=(4.2 * len(axes_costs) + 0.5, 3.6), layout="constrained")
    axes = figure.subplots(1, len(axes_costs), squeeze=False)[0]
    for ax, (key, unit) in zip(axes, axes_costs):
        placed = [(label, cost, q) for label, q, c in points if (cost := c.get(key)) is not None]
        front = frontier([(cost, q) for _, cost, q in placed], not higher)
        ax.plot(*zip(*sorted(front)), color="0.55", linestyle="--", linewidth=1, zorder=1, label="frontier")
        for label, cost, quality in placed:
            mine = label == highlight
            ax.scatter(
                cost,
                quality,
                s=140 if mine else 36,
                marker="*" if mine else "o",
                color="#d62728" if mine else ("C0" if (cost, quality) in front else "0.6"),
                edgecolor="black" if mine else "none",
                zorder=3,
            )
            ax.annotate(label, (cost, quality), fontsize=7, xytext=(4, 3), textcoords="offset points")
        costs = [cost for _, cost, _ in placed]
        if min(costs) > 0 and max(costs) / min(costs) >= 10:  # costs spanning decades read on a log axis
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # labels at decades only: minor ones collide
        else:
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))  # 120000 200000 ... collide too
        ax.set_xlabel(unit)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel(metric)
    figure.suptitle(f"{cell}: {metric} against cost (frontier dashed)", fontsize=9)
    path = out / f"pareto_{slug(cell)}.png"
    figure.savefig(path, dpi=DPI)
    return path


def state_plot(
    rows: list[Row],
    columns: list[str],
    key: str,
    state: dict[tuple[Any, ...], int | None],
    metric: str,
    out: Path,
    panels: list[str],
    higher: bool = True,
) -> Path | None:
    """`metric` against each row's decoding state in bytes (log axis), a line per value of `key` joining its
    rows in order of state, each point named by the columns that tell that line's points apart; one panel
    per value of `panels` (and of `task`: a metric means something within one task); the panel's frontier
    dashed. None unless some line has two points (one point per value is the Pareto plot's state panel)."""
    ki = columns.index(key)
    split = [*panels, *(["task"] if "task" in columns and "task" not in panels else [])]
    grid: dict[tuple[Any, ...], dict[str, list[tuple[float, float, dict[str, Any]]]]] = {}
    for row in rows:
        quality, found = row.mean(metric), state.get(row.values)
        if quality is not None and found:
            panel = tuple(value(row.runs[0], p) for p in split)
            named = {c: v for c, v in zip(columns, row.values) if c != key and c not in split}
            grid.setdefault(panel, {}).setdefault(text(row.values[ki]), []).append((found, quality, named))
    if all(len(points) < 2 for lines in grid.values() for points in lines.values()):
        return None
    labels = list(dict.fromkeys(label for lines in grid.values() for label in lines))
    figure, axes = _panels(len(grid), labels)
    colours = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    for ax, panel in zip(axes, sorted(grid, key=lambda values: tuple(map(sort_key, values)))):
        for label, points in grid[panel].items():
            points.sort(key=lambda p: p[0])
            _line(ax, [p[0] for p in points], [p[1] for p in points], label, False, colours, ax is axes[0])
            apart = [c for c in points[0][2] if len({sort_key(p[2][c]) for p in points}) > 1]
            for cost, quality, named in points:
                name = ", ".join(f"{c.rsplit('.', 1)[-1]}={text(named[c])}" for c in apart)
                ax.annotate(name, (cost, quality), fontsize=6, xytext=(3, 3), textcoords="offset points")
        front = frontier([(p[0], p[1]) for points in grid[panel].values() for p in points], not higher)
        ax.plot(*zip(*front), color="0.55", linestyle="--", linewidth=1, zorder=1)
        ax.set_xscale("log")
        ax.set_xlabel("decoding state bytes per sequence")
        ax.set_title(", ".join(f"{p}={text(v)}" for p, v in zip(split, panel)), fontsize=9)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel(metric)
    figure.suptitle(f"{metric} against decoding state (each panel's frontier dashed)", fontsize=9)
    figure.legend(loc="outside right upper", fontsize=7, title=key, title_fontsize=7)
    path = out / f"{slug(metric)}_vs_state.png"
    figure.savefig(path, dpi=DPI)
    return path


def frontier(points: Sequence[tuple[float, float]], lower: bool = False) -> list[tuple[float, float]]:
    """The (cost, quality) points no other point dominates, i.e. none costs at most as much with at
    least the quality and is strictly better in one of the two; quality rises unless `lower`."""
    good = [(cost, -q if lower else q) for cost, q in points]

    def dominated(p: tuple[float, float]) -> bool:
        return any(c <= p[0] and g >= p[1] and (c < p[0] or g > p[1]) for c, g in good)

    return sorted({(c, -g if lower else g) for c, g in good if not dominated((c, g))})


def _panels(count: int, labels: list[str]) -> tuple[Figure, Any]:
    legend_inches = 0.06 * max(map(len, labels)) + 0.6 if len(labels) > 1 else 0.0
    figure = Figure(figsize=(4.5 * count + 1.0 + legend_inches, 4.0), layout="constrained")
    return figure, figure.subplots(1, count, sharey=True, squeeze=False)[0]
