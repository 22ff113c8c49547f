"""The Protocol section of a compare's report: how each arm's learning rate was chosen (the search on
validation, with its sensitivity curve), the grid and the point each (task, arm) read (`attnx.compare.scores`:
on validation unless `protocol.grid.select=test`, "optimistic (as MAD)"), and the widths matched by
parameters or decoding state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from attnx.compare.plan import WEIGHT_DECAY
from attnx.compare.records import VAL_METRIC, records, rows
from attnx.compare.scores import grid_rule, gridded, over_grid, rule_words
from attnx.report.document import Image, Section, Table
from attnx.report.figures import line_plot

if TYPE_CHECKING:
    from attnx.compare.report import CompareStudy


def protocol_section(study: CompareStudy, runs: Sequence[dict[str, Any]]) -> Section:
    """`runs`: the final runs' labelled records."""
    cfg, out = study.cfg, study.out
    parts: list[str | Table | Image] = []
    if study.search:
        searched = records(out / "lr_search", study.search, cfg)
        columns = ["task", "mechanism", "optim.lr"]
        path = line_plot(
            rows(searched, columns), columns, VAL_METRIC, "optim.lr", out, ["task"], name="lr_sensitivity.png"
        )
        chosen = {(job.task, job.arm.label): job.lr for job in study.jobs}
        body = [[task, label, "–" if lr is None else f"{lr:g}"] for (task, label), lr in chosen.items()]
        parts += [
            f"**Learning rate**: every mechanism trained at each of {list(cfg.protocol.lr_grid)} with seed "
            f"{cfg.seeds[0]}, validation only (no test); the best `{VAL_METRIC}` (the validation twin of "
            "each task's metric) was rerun over the seeds and is what the tables above report.",
            Table(["task", "mechanism", "optim.lr"], body),
        ]
        if path:
            parts.append(Image(path, "learning-rate sensitivity: validation metric against optim.lr"))
    if gridded(cfg):
        parts += grid_parts(cfg, runs)
    if study.matched or study.unmatched:
        parts += matched_parts(study)
    parts += store_parts(cfg, runs)
    return Section("Protocol", parts)


def store_parts(cfg: DictConfig, runs: Sequence[dict[str, Any]]) -> list[str | Table | Image]:
    """Per arm, how many of its runs the run store gave (not trained by this compare), and from which attnx
    and when they were stored."""
    store = OmegaConf.select(cfg, "store", default=None)  # a compare from before the store had none
    if store is None:
        return ["**Run store**: off (`store=null`): every run was trained by this compare."]
    counts: dict[str, list[int]] = {}
    origins: dict[str, set[str]] = {}
    for run in runs:
        label = run["labels"]["mechanism"]
        stored = run.get("stored")
        counts.setdefault(label, [0, 0])[0 if stored else 1] += 1
        if stored:
            origins.setdefault(label, set()).add(f"attnx {stored['attnx']}, {stored['stored'][:10]}")
    body = [
        [label, str(got), str(trained), "; ".join(sorted(origins.get(label, ()))) or "–"]
        for label, (got, trained) in counts.items()
    ]
    return [
        f"**Run store** (`store={store}`): a run whose key (its config, attnx's source, its plugins' "
        "files, torch, the machine, its data) was stored is taken from the store, not trained again.",
        Table(["mechanism", "from the store", "trained here", "stored by"], body, right_from=1),
    ]


def grid_parts(cfg: DictConfig, runs: Sequence[dict[str, Any]]) -> list[str | Table | Image]:
    """The grid, and per (task, mechanism) the points read, with how many seeds chose each."""
    chosen: dict[tuple[str, str], list[str]] = {}
    for run in over_grid(list(runs), grid_rule(cfg)):
        labels = run["labels"]
        point = f"lr={labels['optim.lr']:g} wd={labels[WEIGHT_DECAY]:g}"
        chosen.setdefault((labels["task"], labels["mechanism"]), []).append(point)
    body = [
        [task, label, ", ".join(f"{p} ({points.count(p)})" for p in dict.fromkeys(points))]
        for (task, label), points in chosen.items()
    ]
    grid = cfg.protocol.grid
    return [
        f"**Grid** (MAD's protocol, Poli et al. 2024): every mechanism, task and seed trained at each "
        f"optim.lr in {list(grid.lr)} and {WEIGHT_DECAY} in {list(grid.weight_decay)}; the tables above read "
        f"{rule_words(cfg)} (`protocol.grid.select={grid_rule(cfg)}`).",
        Table(["task", "mechanism", "point read (seeds)"], body),
    ]


def measure(cfg: DictConfig) -> str | None:
    """What the widths were matched by, if anything."""
    return (
        "parameters"
        if cfg.protocol.match_params
        else "decoding state"
        if OmegaConf.select(cfg, "protocol.match_state", default=False)
        else None
    )


def matched_parts(study: CompareStudy) -> list[str | Table | Image]:
    cfg = study.cfg
    state = measure(cfg) == "decoding state"
    body = [
        [
            task,
            label,
            "undeclared" if m.value is None else f"{m.value:,}",
            f"{m.target:,}",
            "–" if m.ratio is None else f"{m.ratio - 1:+.1%}",
            "yes" if m.within else "**no**",
            " ".join(f"{k}={v}" for k, v in m.widths),
        ]
        for (task, label), m in study.matched.items()
    ]
    if state:
        intro = (
            f"**Decoding state matched** to `{cfg.baseline}`'s within ±{cfg.protocol.state_tolerance:.0%} "
            "by scaling each lm task's width keys together (MAD's iso-state comparison): numbers kept per "
            "sequence after the task's longest test sequence."
        )
    else:
        intro = (
            f"**Parameters matched** to `{cfg.baseline}`'s within ±{cfg.protocol.param_tolerance:.0%} by "
            "scaling each task's width keys together (the Long Range Arena's rule):"
        )
    parts: list[str | Table | Image] = [intro]
    if body:
        header = ["task", "mechanism", "state" if state else "params", "baseline", "Δ", "within", "widths"]
        parts.append(Table(header, body, right_from=2))
    if study.unmatched:
        lines = [f"{task}: {why}" for task, why in study.unmatched.items()]
        parts.append("Left at their configured widths: " + "; ".join(lines) + ".")
    return parts
