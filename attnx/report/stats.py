"""The statistics of a comparison over seeds, from scipy.stats: nothing here resamples or tests by hand.

- `summarize(values)`: mean, sample standard deviation and a 95% percentile-bootstrap interval of the
  mean over seeds (`scipy.stats.bootstrap`). With n seeds the bootstrap can only recombine those n
  values, so for small n its interval is narrower than the truth; `n` is stated next to each one.
- `paired(a, b)`: the per-seed differences a_i − b_i of two configurations trained with the same seeds
  (same data order, same initial embeddings): their mean with a bootstrap interval, and a two-sided test
  of "no difference". Up to EXACT_MAX seeds it is the sign-flip permutation test of the mean difference
  (`scipy.stats.permutation_test`, all 2^n sign patterns: under the null each difference is as likely
  negated), exact whatever the values; above that, the Wilcoxon signed-rank test (`scipy.stats.wilcoxon`),
  exact when the differences have no zeros and no ties (n ≤ 50), else by its normal approximation, which
  `Paired.test` then says ("Wilcoxon (approximate: ties)"), never "exact". With n seeds no two-sided
  sign-flip test can go below 2 / 2^n; `smallest_p(n, m)` is that floor after Holm's adjustment over m
  comparisons, m · 2 / 2^n.
  Next to the mean difference, its size in units of its own spread, the standardized paired effect
  d_z = mean(d) / sd(d) (Cohen 1988, the "d_z" of Lakens 2013) with a percentile-bootstrap interval, and
  the smallest detectable difference at this n (`mde`): the true mean difference a one-sample t-test at
  level alpha detects with the given power,
      MDE = (t_{1-alpha/2, n-1} + t_{power, n-1}) * sd(d) / sqrt(n),   power = 0.8,
  the normal-approximation formula of Cohen 1988 (ch. 2) with t quantiles for the n - 1 degrees of
  freedom the seeds give. It is the t-test's bound; the exact test adds its floor `smallest_p(n, m)`.
  Degenerate cases are said, never printed as numbers (`Paired.d_z_note`): differences all equal give no
  d_z (sd 0: mean / 0 is no effect size, and floating point makes it 1e15 rather than inf); at n ≤ 3
  seeds the bootstrap of d_z has too few distinct resamples for an interval; an interval end that the
  resamples leave unbounded (some resample of equal differences) gives no interval either.
- `holm(p)`: Holm's step-down adjustment of several p-values, which bounds the family-wise error rate:
  sort ascending, p_(i)·(m − i + 1) for i = 1..m, made non-decreasing, capped at 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 0.05
POWER = 0.8  # the chance of detecting a true difference of `mde`'s size
RESAMPLES = 9999
EXACT_MAX = 16  # 2^16 sign patterns: beyond that the rank test, whose p is as exact and far cheaper
WILCOXON_EXACT_MAX = 50  # scipy's exact signed-rank distribution; beyond it, its normal approximation
D_Z_INTERVAL_MIN = 4  # seeds: at 3, 10 distinct resamples; half of them put d_z's upper end at infinity
EQUAL = 1e-9  # differences whose sd is below this share of their size are equal (floating point's 1e-17)


@dataclass(frozen=True)
class Summary:
    """One configuration over its seeds."""

    n: int
    mean: float
    std: float | None  # sample standard deviation; None for one seed
    ci: tuple[float, float] | None  # 95% bootstrap interval of the mean; None for one seed


@dataclass(frozen=True)
class Paired:
    """A configuration against a baseline over the seeds both have."""

    n: int
    mean: float  # mean per-seed difference, configuration − baseline
    ci: tuple[float, float] | None
    p: float | None  # two-sided; None for one seed
    test: str  # "sign-flip (exact)", "Wilcoxon (exact)", "Wilcoxon (approximate: ties)", "none"
    d_z: float | None = None  # mean / sd of the differences; None when undefined (`d_z_note` says why)
    d_z_ci: tuple[float, float] | None = None  # its 95% bootstrap interval; None: `d_z_note` says why
    mde: float | None = None  # the smallest difference detectable at this n (module doc); None for one seed
    d_z_note: str = ""  # why d_z or its interval is missing, in words; empty when both are given
    zero: bool = False  # every seed's difference is 0

    @property
    def exact(self) -> bool:
        """Whether `p` is exact (a permutation distribution), not the normal approximation's."""
        return "exact" in self.test


def summarize(values: Sequence[float]) -> Summary:
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return Summary(len(x), float(x.mean()) if len(x) else math.nan, None, None)
    return Summary(len(x), float(x.mean()), float(x.std(ddof=1)), bootstrap_ci(x))


def bootstrap_ci(x: np.ndarray, statistic: Callable[..., Any] = np.mean) -> tuple[float, float]:
    """The percentile bootstrap interval of `statistic` (the mean unless told), seeded: the same report
    twice gives the same interval. Percentile, not BCa: BCa is undefined when every seed gives the same
    value."""
    with np.errstate(invalid="ignore"):  # infinite d_z of resamples whose values are all equal
        result = stats.bootstrap(
            (x,),
            statistic,
            confidence_level=CONFIDENCE,
            n_resamples=RESAMPLES,
            method="percentile",
            rng=np.random.default_rng(0),
        )
    low, high = result.confidence_interval
    return float(low), float(high)


def paired(a: Sequence[float], b: Sequence[float], alpha: float = ALPHA) -> Paired:
    """`a` against `b`, element i of each from the same seed; `alpha` is the level `mde` is computed at."""
    if len(a) != len(b):
        raise ValueError(f"paired samples need equal lengths, got {len(a)} and {len(b)}")
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n = len(d)
    if n < 2:
        return Paired(n, float(d.mean()) if n else math.nan, None, None, "none", d_z_note=_ONE)
    p, name = _test(d)
    effect, interval, note = _effect(d)
    return Paired(
        n,
        float(d.mean()),
        bootstrap_ci(d),
        min(p, 1.0),
        name,
        effect,
        interval,
        mde(d, alpha),
        note,
        bool(np.all(d == 0)),
    )


_ONE = "one seed: no spread"


def _test(d: np.ndarray) -> tuple[float, str]:
    """The two-sided p of "no difference" and the test's name (module doc)."""
    if len(d) <= EXACT_MAX:
        test = stats.permutation_test(
            (d,), np.mean, permutation_type="samples", n_resamples=math.inf, vectorized=True
        )
        return float(test.pvalue), "sign-flip (exact)"
    if np.all(d == 0):  # the rank test has no ranks to give: the differences are all zero, p = 1
        return 1.0, "Wilcoxon (exact)"
    magnitudes = np.abs(d[d != 0])
    why = [
        *(["zeros"] if np.any(d == 0) else []),
        *(["ties"] if len(np.unique(magnitudes)) < len(magnitudes) else []),
        *([f"n > {WILCOXON_EXACT_MAX}"] if len(d) > WILCOXON_EXACT_MAX else []),
    ]
    method = "asymptotic" if why else "exact"
    p = float(stats.wilcoxon(d, method=method).pvalue)
    return p, f"Wilcoxon (approximate: {', '.join(why)})" if why else "Wilcoxon (exact)"


def _effect(d: np.ndarray) -> tuple[float | None, tuple[float, float] | None, str]:
    """d_z, its interval and, where either is missing, why (module doc)."""
    if equal(d):
        same = "no difference at any seed" if np.all(d == 0) else "equal differences"
        return None, None, f"undefined: {same} (sd 0)"
    effect = float(d_z(d))
    if len(d) < D_Z_INTERVAL_MIN:
        return effect, None, f"no interval at n ≤ {D_Z_INTERVAL_MIN - 1}"
    low, high = bootstrap_ci(d, d_z)
    if not (math.isfinite(low) and math.isfinite(high)):
        return effect, None, "no interval: unbounded (resamples of equal differences)"
    return effect, (low, high), ""


def equal(d: np.ndarray, axis: int = -1) -> Any:
    """Whether the differences along `axis` are all the same, up to floating point."""
    spread = d.std(axis=axis, ddof=1) if d.shape[axis] > 1 else np.zeros(np.delete(d.shape, axis))
    return spread <= EQUAL * np.maximum(np.abs(d).max(axis=axis), np.finfo(float).tiny)


def d_z(d: np.ndarray, axis: int = -1) -> Any:
    """mean(d) / sd(d) along `axis` (sample sd); where the differences are all equal (`equal`), ±inf,
    or 0 when they are 0: a bootstrap resample of equal values, which `_effect` reads as unbounded."""
    mean, sd = d.mean(axis=axis), d.std(axis=axis, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        found = np.where(equal(d, axis), np.sign(mean) * np.inf, mean / np.where(sd > 0, sd, 1.0))
    return np.nan_to_num(found, nan=0.0, posinf=np.inf, neginf=-np.inf)


def mde(d: np.ndarray, alpha: float = ALPHA, power: float = POWER) -> float:
    """(t_{1-alpha/2, n-1} + t_{power, n-1}) · sd(d) / √n: the module doc's smallest detectable difference."""
    n = len(d)
    if equal(d):  # no spread: any true difference shows at every seed (sd's 1e-17 is floating point's)
        return 0.0
    t = stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)
    return float(t * d.std(ddof=1) / math.sqrt(n))


def smallest_p(n: int, m: int = 1) -> float:
    """The smallest two-sided p an exact sign-flip test over n paired seeds can give, 2 / 2^n (only the
    observed signs, and all of them flipped, are as extreme as a constant shift), after Holm's adjustment
    over `m` comparisons: the smallest p of a family is multiplied by m. At most 1."""
    return min(1.0, m * 2.0 / 2.0**n)


def seeds_for(alpha: float = ALPHA, m: int = 1) -> int:
    """The fewest paired seeds with which the exact test, Holm-adjusted over `m` comparisons, can reach
    p < alpha at all."""
    return next(n for n in range(1, 1024) if smallest_p(n, m) < alpha)


def holm(p: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values in the input order; a None (no test) stays None and is not counted."""
    tested = sorted((value, i) for i, value in enumerate(p) if value is not None)
    m = len(tested)
    adjusted: list[float | None] = [None] * len(p)
    running = 0.0
    for rank, (value, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * value))
        adjusted[i] = running
    return adjusted
