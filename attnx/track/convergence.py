"""Whether a run's validation curve converged: a rule on the curve alone, with no torch import, so
`attnx train` (its record, `convergence.stop`), `attnx report` and `attnx compare` share one verdict.

For a curve of k validations v_1..v_k of a metric (negated first when lower is better: losses, error
rates), a tolerance tau and a ceiling c (the metric's best possible value, when it has one):

    reached the ceiling   max_i v_i >= c - tau                                  -> converged
    too few validations   k < min_validations                                   -> no verdict (None)
    otherwise             q = max(1, k // 4)
                          improvement = mean(v_{k-q+1..k}) - mean(v_{k-2q+1..k-q})
                          margin = 2 * sigma * sqrt(2 / q)
                          converged  <=>  improvement < tau + margin

The last quarter of the curve against the quarter before it: windowed means, so a flat curve whose
validations scatter by more than tau is not "still improving" by noise alone (the scatter of a mean of q
values shrinks as 1/sqrt(q)), while a curve that still climbs by tau per quarter of the run is. The
margin is two standard errors of that difference of means: sigma, one validation's noise, estimated from
the successive differences d_i = v_i - v_{i-1} of the last 2q validations as sqrt(var(d) / 2) (their
mean, the trend, taken out; no margin with fewer than 3 differences). A validation split of 300 examples
scatters an accuracy near 0.5 by 0.029: without the margin a curve flat at chance read as still improving
in about a third of the runs, by noise alone. Judging
progress over a strip of validations rather than one is Prechelt's ("Early stopping - but when?", in
Neural Networks: Tricks of the Trade, 1998); the strip here is a share of the run, not a fixed count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MIN_VALIDATIONS = 4
# metrics bounded by 1 (a share of tokens, sequences or labels): their natural ceiling
BOUNDED = ("acc", "exact_match", "token_acc", "f1")
# names whose values fall as models improve: losses, perplexity, error rates (PER, WER)
LOWER_IS_BETTER = ("loss", "perplexity", "per", "wer")


def lower_is_better(metric: str) -> bool:
    """Losses, perplexity and error rates (PER, WER) fall as models improve; everything else rises."""
    name = metric.rsplit("/", 1)[-1]
    return any(word in name for word in LOWER_IS_BETTER)


def natural_ceiling(metric: str) -> float | None:
    """1.0 for a share (`val/acc`, `val/exact_match`, `val/token_acc`, `val/f1`); None for a metric
    with no known best value (a loss, BLEU), which only the plateau rule judges."""
    return 1.0 if metric.rsplit("/", 1)[-1] in BOUNDED else None


def convergence(
    curve: Sequence[Sequence[float]],
    tolerance: float,
    ceiling: float | None,
    higher_is_better: bool = True,
    min_validations: int = MIN_VALIDATIONS,
    metric: str | None = None,
) -> dict[str, Any]:
    """The verdict on `curve` ((step, value) per validation, in order) as results.json records it:
    metric, tolerance, ceiling, validations (k), improvement (the last window's mean over the one before,
    in the better direction; None under 2 validations), converged (True, False, or None when too few
    validations) and reason (a short phrase)."""
    sign = 1.0 if higher_is_better else -1.0
    values = [sign * float(value) for _, value in curve]
    k = len(values)
    q = max(1, k // 4)
    improvement = _mean(values[-q:]) - _mean(values[-2 * q : -q]) if k >= 2 else None
    margin = 2 * _noise(values[-2 * q :]) * math.sqrt(2 / q)
    if ceiling is not None and k and max(values) >= sign * ceiling - tolerance:
        converged, reason = True, "reached the ceiling"
    elif k < min_validations:
        converged, reason = None, f"too few validations (k < {min_validations})"
    elif improvement is not None and improvement < tolerance + margin:
        converged, reason = True, "plateaued"
    else:
        converged, reason = False, "still improving"
    return {
        "metric": metric,
        "tolerance": tolerance,
        "ceiling": ceiling,
        "validations": k,
        "improvement": improvement,
        "margin": margin,
        "converged": converged,
        "reason": reason,
    }


def _noise(values: Sequence[float]) -> float:
    """One value's noise around the curve's local trend, from successive differences (0 under 3)."""
    steps = [b - a for a, b in zip(values, values[1:])]
    if len(steps) < 3:
        return 0.0
    centre = _mean(steps)
    return math.sqrt(sum((d - centre) ** 2 for d in steps) / (len(steps) - 1) / 2)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
