"""The report's statistics against cases whose answers are known by hand."""

from __future__ import annotations

import math

import pytest

from attnx.report import stats
from attnx.report.runs import Row
from attnx.report.significance import against_baseline, cells, convergence, ranks, win_matrix


def test_identical_runs_differ_by_zero_with_p_one() -> None:
    result = stats.paired([0.8, 0.7, 0.9], [0.8, 0.7, 0.9])
    assert (result.mean, result.ci, result.p, result.test) == (0.0, (0.0, 0.0), 1.0, "sign-flip")


@pytest.mark.parametrize("n", [3, 5, 8])
def test_a_constant_shift_gives_the_smallest_attainable_p(n: int) -> None:
    base = [0.1 * i for i in range(n)]
    result = stats.paired([b + 0.02 for b in base], base)
    assert result.mean == pytest.approx(0.02)
    assert result.p == pytest.approx(stats.smallest_p(n)) == pytest.approx(2 / 2**n)  # 0.25 for 3 seeds
    assert stats.paired(base, [b + 0.02 for b in base]).p == pytest.approx(result.p)  # two-sided


def test_the_sign_flip_p_counts_the_sign_patterns_as_extreme() -> None:
    # differences 1, 2, 3: of the 8 sign patterns, mean >= 2 needs (+,+,+) only; |mean| >= 2: 2 of 8
    assert stats.paired([1, 2, 3], [0, 0, 0]).p == pytest.approx(2 / 8)
    # differences 3, 1, -1 (mean 1): the means of the 8 patterns are ±1/3, ±1, ±1, ±5/3; |mean| >= 1: 6 of 8
    assert stats.paired([3, 1, -1], [0, 0, 0]).p == pytest.approx(6 / 8)


def test_many_seeds_use_the_signed_rank_test() -> None:
    a = [0.5 + 0.01 * i for i in range(20)]
    result = stats.paired(a, [x - 0.01 * (1 + i % 3) for i, x in enumerate(a)])
    assert result.test == "wilcoxon" and result.p < 1e-4 and result.n == 20
    assert stats.paired(a, a).p == 1.0  # all zero differences: no ranks, no evidence


def test_holm_matches_a_hand_worked_example() -> None:
    # sorted 0.01, 0.02, 0.03, 0.04 times 4, 3, 2, 1: 0.04, 0.06, 0.06, 0.04; made monotone: 0.04, 0.06 (x3)
    assert stats.holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert stats.holm([0.5, None, 0.9]) == [pytest.approx(1.0), None, pytest.approx(1.0)]  # capped at 1
    assert stats.holm([0.001]) == [pytest.approx(0.001)]


def test_summaries_and_the_seed_floor() -> None:
    s = stats.summarize([0.78, 0.80, 0.81])
    assert s.n == 3 and s.mean == pytest.approx(0.7966667) and s.std == pytest.approx(0.0152753, rel=1e-5)
    assert s.ci == pytest.approx((0.78, 0.81))  # 3 seeds: the bootstrap spans the seeds themselves
    assert stats.summarize([0.5, 0.5]).ci == (0.5, 0.5)  # degenerate data: a point, not NaN
    one = stats.summarize([0.7])
    assert (one.std, one.ci) == (None, None) and stats.paired([1.0], [0.0]).p is None
    assert stats.seeds_for(0.05) == 6 and math.isclose(stats.smallest_p(6), 1 / 32)
    with pytest.raises(ValueError, match="equal lengths"):
        stats.paired([1, 2], [1])


def run(attention: str, task: str, seed: int, acc: float) -> dict:
    return {"config": {"seed": seed}, "metrics": {"test/acc": acc}, "_attention": attention, "_task": task}


def rows(table: dict[tuple[str, str], list[float]]) -> list[Row]:
    return [
        Row((task, attention), [run(attention, task, seed, acc) for seed, acc in enumerate(accs)])
        for (task, attention), accs in table.items()
    ]


TABLE = {
    ("a", "additive"): [0.80, 0.82, 0.81],
    ("a", "dot"): [0.70, 0.71, 0.69],  # worse on every seed
    ("a", "none"): [0.79, 0.85, 0.80],  # mixed: a tie
    ("b", "additive"): [0.50, 0.50, 0.50],
    ("b", "dot"): [0.60, 0.60, 0.61],  # better on every seed
}


def test_paired_comparisons_win_matrix_and_ranks_within_cells() -> None:
    grouped = cells(rows(TABLE), ["task", "attention"], "attention")
    assert list(grouped.rows) == [("a",), ("b",)] and grouped.values() == ["additive", "dot", "none"]
    found = {(c.cell, c.value): c for c in against_baseline(grouped, "additive", "test/acc")}
    assert set(found) == {(("a",), "dot"), (("a",), "none"), (("b",), "dot")}
    dot_a = found[(("a",), "dot")]
    assert dot_a.result.mean == pytest.approx(-0.11) and dot_a.result.p == pytest.approx(0.25)
    assert dot_a.p_holm == pytest.approx(0.5)  # Holm within the cell: task a's two comparisons
    assert found[(("b",), "dot")].p_holm == pytest.approx(0.25)  # task b's one: its raw p
    assert dot_a.verdict().startswith("untestable at 3 seeds")
    matrix = win_matrix(grouped, "test/acc")
    assert matrix[("a",)][("additive", "dot")] == "W" and matrix[("a",)][("dot", "additive")] == "L"
    assert matrix[("a",)][("additive", "none")] == "T"
    assert matrix[("b",)] == {("additive", "dot"): "L", ("dot", "additive"): "W"}
    ranked = ranks(grouped, "test/acc")
    assert ranked["dot"] == {("a",): 3.0, ("b",): 1.0} and ranked["none"] == {("a",): 1.0}


def test_columns_that_follow_from_the_key_do_not_split_cells() -> None:
    # a mechanism's default score varies with it; a tuned learning rate varies within the cell
    table = [
        Row(("additive", "additive", 0.01), [run("additive", "t", 0, 0.9)]),
        Row(("dot", "dot", 0.1), [run("dot", "t", 0, 0.8)]),
    ]
    grouped = cells(table, ["attention", "score", "optim.lr"], "attention", tuned=["optim.lr"])
    assert grouped.columns == [] and list(grouped.rows[()]) == ["additive", "dot"]
    assert win_matrix(grouped, "test/acc")[()][("additive", "dot")] == "W"  # one seed: by the sign


def test_effect_size_and_smallest_detectable_difference_match_a_hand_computation() -> None:
    # differences 1, 2, 3, 4: mean 2.5, sd sqrt(5/3) = 1.291; t_{0.975,3} = 3.182, t_{0.8,3} = 0.978
    result = stats.paired([1, 2, 3, 4], [0, 0, 0, 0])
    assert result.d_z == pytest.approx(2.5 / 1.2909944)
    assert result.mde == pytest.approx((3.1824463 + 0.9784723) * 1.2909944 / 2)
    assert result.d_z_ci is not None and result.d_z_ci[0] <= result.d_z <= result.d_z_ci[1]
    assert stats.paired([0.5, 0.5], [0.5, 0.5]).d_z == 0.0  # no difference at all: 0, not NaN
    assert stats.paired([1.0], [0.0]).mde is None
    assert stats.seeds_for(0.01) == 8  # 2 / 2^8 = 0.0078


def converging(row: Row, *verdicts: bool | None) -> Row:
    for run_, converged in zip(row.runs, verdicts):
        run_["convergence"] = {"converged": converged, "reason": "test"}
    return row


def test_a_difference_with_a_side_still_improving_is_no_win_and_no_loss() -> None:
    table = rows(TABLE)
    converging(table[0], True, True, True)  # a, additive
    converging(table[1], True, False, True)  # a, dot: one run still improving
    grouped = cells(table, ["task", "attention"], "attention")
    found = {(c.cell, c.value): c for c in against_baseline(grouped, "additive", "test/acc")}
    assert found[(("a",), "dot")].verdict() == "not converged: raise the budget"
    assert found[(("a",), "none")].verdict().startswith("untestable")  # no verdicts recorded: as before
    matrix = win_matrix(grouped, "test/acc")
    assert matrix[("a",)][("additive", "dot")] == "NC" and matrix[("a",)][("additive", "none")] == "T"
    assert str(convergence(table[1])) == "still improving (1 of 3)"
    assert str(convergence(table[0])) == "converged 3/3" and str(convergence(table[2])) == "–"
