"""What an `attnx report` is made of: a `Study` holds the runs, their rows and what the statistics compare;
`attnx.report.sections` makes the report's sections from it (`attnx.report.statistics_section` its
Statistics), and `attnx.compare.report` builds one with its ranking. Its `verdicts` are decided once
(`attnx.report.verdicts`) and read by every table, matrix, ranking, CSV row and sentence."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from attnx.report.runs import Row, higher_is_better
from attnx.report.significance import Cells, cells
from attnx.report.verdicts import Procedure, Verdicts, decide


@dataclass
class Study:
    """What a report is made of: the runs, their rows, and what the statistics compare."""

    runs: list[dict[str, Any]]  # every record, completed or not, with its folder as `_path`
    columns: list[str]
    metrics: list[str]  # the first is the one compared, plotted and ranked
    rows: list[Row]
    key: str | None = None  # the compared key: the baseline's, or `attention` when it is swept
    baseline: Any = None  # the key's baseline value, None for no paired comparison
    baselines: dict[tuple[Any, ...], Any] = field(default_factory=dict)  # a cell's own, where it differs
    tuned: list[str] = field(default_factory=list)  # keys chosen per row, left out of a cell's identity
    inference_ms: dict[Any, float] | None = None  # the key's value -> `attnx bench` forward ms at one N
    bench_n: int | None = None
    highlight: Any = None  # the key's value to mark (a candidate)
    # a row's values -> its model's decoding state in bytes per sequence (None: undeclared); when given,
    # the Pareto view's third cost instead of inference ms (attnx compare's `pareto: state`)
    state_bytes: dict[tuple[Any, ...], int | None] | None = None
    procedure: Procedure = field(default_factory=Procedure)  # alpha, and where Holm's family ends
    # a compare's candidate: the family is it against each other value, not the rows against the baseline
    candidate: Any = None

    @property
    def left_out(self) -> list[dict[str, Any]]:
        """The runs no table, statistic or figure shows: not completed, or without a valid record."""
        return [r for r in self.runs if r.get("status") != "completed"]

    def cells(self) -> Cells | None:
        return cells(self.rows, self.columns, self.key, self.tuned) if self.key in self.columns else None

    def higher(self, metric: str) -> bool:
        """Whether `metric` rises as models improve, as the runs declare it (`runs.higher_is_better`)."""
        return higher_is_better(self.runs, metric)

    def baseline_of(self, cell: tuple[Any, ...]) -> Any:
        return self.baselines.get(cell, self.baseline)

    @functools.cached_property
    def verdicts(self) -> Verdicts | None:
        """Every pair of every cell on the first metric, decided once (`attnx.report.verdicts`): the
        family is the candidate's comparisons in a compare, the rows against the baseline with one, else
        every pair of a cell."""
        grouped = self.cells()
        if grouped is None:
            return None
        metric = self.metrics[0]
        if self.candidate is not None:
            focus = {cell: self.candidate for cell in grouped.rows}
        elif self.baseline is not None:
            focus = {cell: self.baseline_of(cell) for cell in grouped.rows}
        else:
            focus = {}
        reference = {cell: self.baseline_of(cell) for cell in grouped.rows}
        return decide(
            grouped,
            metric,
            self.higher(metric),
            self.procedure,
            focus,
            focus_first=self.candidate is not None,
            reference=reference,
        )
