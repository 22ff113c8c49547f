"""The report's statistics against cases whose answers are known by hand, and the one decision procedure
(attnx.report.verdicts) on fabricated rows: its family, floor after adjustment, and words."""

from __future__ import annotations

import math

import pytest

from attnx.report import stats
from attnx.report.runs import Row
from attnx.report.significance import cells, convergence, ranks
from attnx.report.verdicts import Procedure, decide


def test_identical_runs_differ_by_zero_with_p_one() -> None:
    result = stats.paired([0.8, 0.7, 0.9], [0.8, 0.7, 0.9])
    assert (result.mean, result.ci, result.p, result.test) == (0.0, (0.0, 0.0), 1.0, "sign-flip (exact)")
    assert (
        result.zero
        and result.d_z is None
        and result.d_z_note == "undefined: no difference at any seed (sd 0)"
    )


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


def test_many_seeds_use_the_signed_rank_test_and_say_when_its_p_is_approximate() -> None:
    a = [0.5 + 0.01 * i for i in range(20)]
    distinct = stats.paired(a, [x - 0.001 * (1 + i) for i, x in enumerate(a)])
    assert distinct.test == "Wilcoxon (exact)" and distinct.exact and distinct.p == pytest.approx(2 / 2**20)
    tied = stats.paired(a, [x - 0.01 * (1 + i % 3) for i, x in enumerate(a)])  # |d| takes 3 values: ties
    assert tied.test == "Wilcoxon (approximate: ties)" and not tied.exact and tied.p < 1e-4 and tied.n == 20
    zeros = stats.paired(a, [x - 0.001 * (i % 2) * (1 + i) for i, x in enumerate(a)])
    assert zeros.test == "Wilcoxon (approximate: zeros)"
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
    # after Holm over m comparisons the floor is m times higher: the candidate's 5 need 10 seeds for 0.01
    assert stats.smallest_p(8, 5) == pytest.approx(0.0390625) and stats.seeds_for(0.01, 5) == 10
    assert stats.smallest_p(10, 5) == pytest.approx(0.009765625) and stats.seeds_for(0.01, 15) == 12
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


def test_the_family_is_the_baseline_s_comparisons_and_holm_runs_within_each_cell() -> None:
    grouped = cells(rows(TABLE), ["task", "attention"], "attention")
    assert list(grouped.rows) == [("a",), ("b",)] and grouped.values() == ["additive", "dot", "none"]
    focus = {cell: "additive" for cell in grouped.rows}
    verdicts = decide(grouped, "test/acc", True, Procedure(), focus, reference=focus)
    found = {(v.cell, v.a, v.b): v for v in verdicts.pairs}
    assert set(found) == {
        (("a",), "dot", "additive"),
        (("a",), "none", "additive"),
        (("a",), "dot", "none"),
        (("b",), "dot", "additive"),
    }
    dot_a = found[(("a",), "dot", "additive")]
    assert dot_a.family == "family" and dot_a.m == 2 and found[(("a",), "dot", "none")].family == "context"
    assert dot_a.result.mean == pytest.approx(-0.11) and dot_a.result.p == pytest.approx(0.25)
    assert dot_a.p_adjusted == pytest.approx(0.5)  # Holm within the cell: task a's two comparisons
    assert dot_a.floor == pytest.approx(0.5)  # 2 · 2/2^3: untestable at 3 seeds whatever the data
    assert dot_a.outcome == "U" and dot_a.words == "untestable at 3 seeds (floor 0.500 ≥ α = 0.05)"
    assert verdicts.of(("b",), "dot", "additive").p_adjusted == pytest.approx(0.25)  # task b's one: raw
    assert verdicts.of(("a",), "additive", "dot").result.mean == pytest.approx(
        0.11
    )  # seen from the other side
    assert verdicts.tally("dot")["U"] == 3
    # Holm over every cell at once (`--family all`, a compare's `family=suite`): task b's comparison joins a's
    suite = decide(grouped, "test/acc", True, Procedure(span="all"), focus, reference=focus)
    assert suite.of(("b",), "dot", "additive").m == 3 and suite.of(("a",), "dot", "none").m == 1
    ranked = ranks(grouped, "test/acc", higher=True)
    assert ranked["dot"] == {("a",): 3.0, ("b",): 1.0} and ranked["none"] == {("a",): 1.0}
    assert ranks(grouped, "test/acc", higher=False)["dot"] == {("a",): 1.0, ("b",): 2.0}


def test_a_win_needs_the_adjusted_p_under_alpha_and_the_floor_under_alpha() -> None:
    seeds = range(8)
    table = {
        ("t", "additive"): [0.5 + 0.01 * s for s in seeds],
        ("t", "dot"): [0.6 + 0.01 * s + 0.001 * s * s for s in seeds],  # better at every seed
        ("t", "none"): [0.5 + 0.01 * s + (0.02 if s % 2 else -0.021) for s in seeds],  # a coin flip
    }
    grouped = cells(rows(table), ["task", "attention"], "attention")
    focus = {(): "additive"}
    verdicts = decide(grouped, "test/acc", True, Procedure(), focus, reference=focus)
    dot = verdicts.of((), "dot", "additive")
    assert dot.floor == pytest.approx(2 * 2 / 2**8) and dot.p_adjusted == pytest.approx(2 * 2 / 2**8)
    assert (dot.outcome, dot.words) == ("W", "better") and verdicts.of((), "additive", "dot").outcome == "L"
    assert verdicts.of((), "none", "additive").words == "no significant difference"
    strict = decide(grouped, "test/acc", True, Procedure(alpha=0.01), focus, reference=focus)
    assert strict.of((), "dot", "additive").outcome == "U"  # 2 · 2/2^8 = 0.016 ≥ 0.01
    lower = decide(grouped, "test/acc", False, Procedure(), focus, reference=focus)
    assert lower.of((), "dot", "additive").words == "worse"  # the declared direction decides
    everything = decide(grouped, "test/acc", True, Procedure())  # no focus: every pair is the family
    assert {v.family for v in everything.pairs} == {"family"} and {v.m for v in everything.pairs} == {3}
    with pytest.raises(ValueError, match=r"^alpha=1.5: must be in \(0, 1\)"):
        Procedure(alpha=1.5)
    with pytest.raises(ValueError, match="^family=tasks: must be one of cell, all$"):
        Procedure(span="tasks")


def test_columns_that_follow_from_the_key_do_not_split_cells() -> None:
    # a mechanism's default score varies with it; a tuned learning rate varies within the cell
    table = [
        Row(("additive", "additive", 0.01), [run("additive", "t", 0, 0.9)]),
        Row(("dot", "dot", 0.1), [run("dot", "t", 0, 0.8)]),
    ]
    grouped = cells(table, ["attention", "score", "optim.lr"], "attention", tuned=["optim.lr"])
    assert grouped.columns == [] and list(grouped.rows[()]) == ["additive", "dot"]
    one = decide(grouped, "test/acc", True, Procedure()).of((), "additive", "dot")
    assert (one.outcome, one.words) == ("U", "one seed: no test")  # never a win by the sign alone


def test_effect_size_and_smallest_detectable_difference_match_a_hand_computation() -> None:
    # differences 1, 2, 3, 4: mean 2.5, sd sqrt(5/3) = 1.291; t_{0.975,3} = 3.182, t_{0.8,3} = 0.978
    result = stats.paired([1, 2, 3, 4], [0, 0, 0, 0])
    assert result.d_z == pytest.approx(2.5 / 1.2909944)
    assert result.mde == pytest.approx((3.1824463 + 0.9784723) * 1.2909944 / 2)
    assert result.d_z_ci is not None and result.d_z_ci[0] <= result.d_z <= result.d_z_ci[1]
    assert stats.paired([0.5, 0.5], [0.5, 0.5]).d_z is None  # no difference at all: undefined, in words
    assert stats.paired([1.0], [0.0]).mde is None
    assert stats.seeds_for(0.01) == 8  # 2 / 2^8 = 0.0078


@pytest.mark.parametrize("n", [3, 5, 10])
def test_equal_differences_give_no_effect_size_and_never_a_huge_number(n: int) -> None:
    """[0.1, 0.1, 0.1] once gave d_z = 5.9e15 (floating point's sd of 1.7e-17) and an inverted interval."""
    result = stats.paired([0.1 + 0.1 * i for i in range(n)], [0.1 * i for i in range(n)])
    assert result.d_z is None and result.d_z_ci is None and result.mde == 0.0
    assert result.d_z_note == "undefined: equal differences (sd 0)"
    assert result.ci is not None and result.ci[0] <= result.ci[1]


def test_few_seeds_give_no_d_z_interval_and_no_interval_is_ever_infinite() -> None:
    assert stats.paired([1, 2, 4], [0, 0, 0]).d_z_note == "no interval at n ≤ 3"
    assert stats.paired([1, 3], [0, 0]).d_z_ci is None  # (−inf, inf) before
    # two equal differences of four: a resample of them alone has sd 0, the interval's end is unbounded
    result = stats.paired([0.3, 0.1, 0.1, 0.1], [0, 0, 0, 0])
    assert result.d_z == pytest.approx(1.5) and result.d_z_ci is None
    assert result.d_z_note == "no interval: unbounded (resamples of equal differences)"
    for values in ([0.1, 0.5, 0.2, 0.4, 0.3], [1.0, 1.1, 0.9, 1.2, 1.0, 1.3]):
        found = stats.paired(values, [0.0] * len(values))
        assert found.d_z_ci is not None and all(math.isfinite(x) for x in found.d_z_ci)


def converging(row: Row, *verdicts: bool | None) -> Row:
    for run_, converged in zip(row.runs, verdicts):
        run_["convergence"] = {"converged": converged, "reason": "test"}
    return row


def test_a_difference_with_a_side_still_improving_is_no_win_and_no_loss() -> None:
    table = rows(TABLE)
    converging(table[0], True, True, True)  # a, additive
    converging(table[1], True, False, True)  # a, dot: one run still improving
    converging(table[2], True, None, None)  # a, none: two runs without a verdict (too few validations)
    grouped = cells(table, ["task", "attention"], "attention")
    verdicts = decide(grouped, "test/acc", True, Procedure())
    dot = verdicts.of(("a",), "dot", "additive")
    assert (dot.outcome, dot.words) == ("NC", "not converged: raise the budget")
    assert verdicts.of(("a",), "additive", "dot").outcome == "NC"  # either side
    assert verdicts.of(("a",), "none", "additive").outcome == "U"  # runs without a verdict: settled
    assert str(convergence(table[1])) == "still improving (1 of 3)" and not convergence(table[1]).settled
    assert str(convergence(table[0])) == "converged 3/3" and str(convergence(table[3])) == "–"
    assert (
        str(convergence(table[2])) == "converged 1/3 (2 without a verdict)" and convergence(table[2]).settled
    )
