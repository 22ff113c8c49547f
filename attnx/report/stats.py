"""The statistics of a comparison over seeds, from scipy.stats: nothing here resamples or tests by hand.

- `summarize(values)`: mean, sample standard deviation and a 95% percentile-bootstrap interval of the
  mean over seeds (`scipy.stats.bootstrap`). With n seeds the bootstrap can only recombine those n
  values, so for small n its interval is narrower than the truth; `n` is stated next to each one.
- `paired(a, b)`: the per-seed differences a_i − b_i of two configurations trained with the same seeds
  (same data order, same initial embeddings): their mean with a bootstrap interval, and an exact
  two-sided test of "no difference". Up to EXACT_MAX seeds it is the sign-flip permutation test of
  the mean difference (`scipy.stats.permutation_test`, all 2^n sign patterns: under the null each
  difference is as likely negated); above that, the Wilcoxon signed-rank test (`scipy.stats.wilcoxon`).
  With n seeds no two-sided sign-flip test can go below `smallest_p(n)` = 2 / 2^n: 0.25 for 3 seeds.
  Next to the mean difference, its size in units of its own spread, the standardized paired effect
  d_z = mean(d) / sd(d) (Cohen 1988, the "d_z" of Lakens 2013) with a percentile-bootstrap interval, and
  the smallest detectable difference at this n (`mde`): the true mean difference a one-sample t-test at
  level alpha detects with the given power,
      MDE = (t_{1-alpha/2, n-1} + t_{power, n-1}) * sd(d) / sqrt(n),   alpha = 0.05, power = 0.8,
  the normal-approximation formula of Cohen 1988 (ch. 2) with t quantiles for the n - 1 degrees of
  freedom the seeds give. It is the t-test's bound; the exact test adds its floor `smallest_p(n)`.
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
    test: str  # "sign-flip" | "wilcoxon" | "none"
    d_z: float | None = None  # mean / sd of the differences (±inf when they are all equal and not 0)
    d_z_ci: tuple[float, float] | None = None  # its 95% bootstrap interval
    mde: float | None = None  # the smallest difference detectable at this n (module doc); None for one seed


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


def paired(a: Sequence[float], b: Sequence[float]) -> Paired:
    """`a` against `b`, element i of each from the same seed."""
    if len(a) != len(b):
        raise ValueError(f"paired samples need equal lengths, got {len(a)} and {len(b)}")
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n = len(d)
    if n < 2:
        return Paired(n, float(d.mean()) if n else math.nan, None, None, "none")
    if n <= EXACT_MAX:
        test = stats.permutation_test(
            (d,), np.mean, permutation_type="samples", n_resamples=math.inf, vectorized=True
        )
        p, name = float(test.pvalue), "sign-flip"
    elif np.all(d == 0):  # the rank test has no ranks to give: the differences are all zero, p = 1
        p, name = 1.0, "wilcoxon"
    else:
        p, name = float(stats.wilcoxon(d).pvalue), "wilcoxon"
    return Paired(
        n, float(d.mean()), bootstrap_ci(d), min(p, 1.0), name, float(d_z(d)), bootstrap_ci(d, d_z), mde(d)
    )


def d_z(d: np.ndarray, axis: int = -1) -> Any:
    """mean(d) / sd(d) along `axis` (sample sd); differences all equal give ±inf, or 0 when they are 0."""
    mean, sd = d.mean(axis=axis), d.std(axis=axis, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):  # x / 0 is ±inf; 0 / 0 is nan, made 0
        return np.nan_to_num(mean / sd, nan=0.0, posinf=np.inf, neginf=-np.inf)


def mde(d: np.ndarray, alpha: float = ALPHA, power: float = POWER) -> float:
    """(t_{1-alpha/2, n-1} + t_{power, n-1}) · sd(d) / √n: the module doc's smallest detectable difference."""
    n = len(d)
    t = stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)
    return float(t * d.std(ddof=1) / math.sqrt(n))


def smallest_p(n: int) -> float:
    """The smallest two-sided p-value an exact sign-flip test over n paired seeds can give: 2 / 2^n
    (only the observed signs, and all of them flipped, are as extreme as a constant shift)."""
    return min(1.0, 2.0 / 2.0**n)


def seeds_for(alpha: float = ALPHA) -> int:
    """The fewest paired seeds with which the exact test can reach p < alpha at all."""
    return next(n for n in range(1, 64) if smallest_p(n) < alpha)


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
