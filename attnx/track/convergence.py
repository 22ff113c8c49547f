"""Whether a run's validation curve converged: a rule on the curve alone, with no torch import, so
`attnx train` (its record, `convergence.stop`), `attnx report` and `attnx compare` share one verdict.

For a curve of k validations v_1..v_k of a metric (negated first when its declaration says lower is
better), a tolerance tau and a ceiling c (the metric's best possible value, when it has one):

    reached the ceiling   max_i v_i >= c - tau                                  -> converged
    too few validations   k < min_validations                                   -> no verdict (None)
    otherwise             q = max(1, k // 4)
                          improvement = mean(v_{k-q+1..k}) - mean(v_{k-2q+1..k-q})
                          margin = 2 * sigma * sqrt(2 / q)
                          converged  <=>  improvement < tau + margin

The last quarter of the curve against the quarter before it: windowed means, so a flat curve whose
validations scatter by more than tau is not "still improving" by noise alone (the scatter of a mean of q
values shrinks as 1/sqrt(q)), while a curve that still climbs by tau per quarter of the run is. The
margin is two standard errors of that difference of means, sigma being one validation's noise, the
larger of two estimates where both exist:

- binomial: for a share of the validation split's examples (a metric declared a proportion: accuracy,
  exact match), sqrt(p (1 - p) / n) with p the mean of the last 2q validations and n the split's examples
  (`examples`). It exists from the first validation, and it is what a validation set of n examples can
  resolve at all. n counts examples for a token-level share too (token accuracy, an lm's accuracy over
  its target positions): the tokens of one sequence are not independent draws, so the estimate is an
  upper bound of their noise there (fewer false "still improving", more misses).
- curve: the successive differences d_i = v_i - v_{i-1} of the last max(2q, 6) validations (all of them
  when fewer), their mean (the trend) taken out, sqrt(var(d) / 2); it needs 3 differences (k >= 4).

With neither (a metric that is no proportion, under 4 validations) there is no verdict. The rule's error
rates, measured on simulated curves with the noise of accuracy near 0.5 on 300 validation examples (0.029;
tests/unit/track/test_convergence_rule.py, README "Verdicts it can stand behind"): a flat curve is called
"still improving" in at most 1% of runs at every k from 4 to 40 (the curve's estimate alone, at most 3%;
the rule before the binomial estimate: 45-47% at k = 4-7). The price is the miss rate, a curve still rising
called converged: rising by 0.05 per validation, about 90% at k = 4-7 (q = 1: one validation against the
one before, whose difference must clear 0.087), 19% at k = 8, none from 12; by 0.02, 84% at 8, 47% at
12, 11% at 16, none at 24; by 0.01, 87% at 12, 69% at 16, 16% at 24, none at 40. A verdict from few
validations only catches steep rises: `convergence.min_validations` is where a suite says how many its
budget gives.
Judging progress over a strip of validations rather than one is Prechelt's ("Early stopping - but when?",
in Neural Networks: Tricks of the Trade, 1998); the strip here is a share of the run, not a fixed count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MIN_VALIDATIONS = 4
NOISE_WINDOW = 6  # the fewest validations the curve's noise is estimated from, when the run has them


def convergence(
    curve: Sequence[Sequence[float]],
    tolerance: float,
    ceiling: float | None,
    higher_is_better: bool = True,
    min_validations: int = MIN_VALIDATIONS,
    metric: str | None = None,
    examples: int | None = None,
) -> dict[str, Any]:
    """The verdict on `curve` ((step, value) per validation, in order) as results.json records it:
    metric, tolerance, ceiling, validations (k), improvement (the last window's mean over the one before,
    in the better direction; None under 2 validations), margin, the noise it is made of (`noise`: sigma,
    `noise_source`: binomial or curve, and the `examples` of a proportion's validation split), converged
    (True, False, or None when too few validations or no noise estimate) and reason (a short phrase).
    `examples`: the validation split's size when the metric is a proportion of its examples, else None."""
    raw = [float(value) for _, value in curve]
    sign = 1.0 if higher_is_better else -1.0
    values = [sign * v for v in raw]
    k = len(values)
    q = max(1, k // 4)
    improvement = _mean(values[-q:]) - _mean(values[-2 * q : -q]) if k >= 2 else None
    sigma, source = noise(raw[-max(2 * q, NOISE_WINDOW) :], raw[-2 * q :], examples)
    margin = None if sigma is None else 2 * sigma * math.sqrt(2 / q)
    if ceiling is not None and k and max(values) >= sign * ceiling - tolerance:
        converged, reason = True, "reached the ceiling"
    elif k < min_validations:
        converged, reason = None, f"too few validations (k < {min_validations})"
    elif margin is None or improvement is None:
        converged, reason = None, "no noise estimate (not a proportion, and under 4 validations)"
    elif improvement < tolerance + margin:
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
        "noise": sigma,
        "noise_source": source,
        "examples": examples,
        "converged": converged,
        "reason": reason,
    }


def noise(
    recent: Sequence[float], last: Sequence[float], examples: int | None
) -> tuple[float | None, str | None]:
    """One validation's noise and where it came from (module doc): the larger of the binomial error of a
    share of `examples` at the mean of `last` (the last 2q values), and the scatter of `recent` (the last
    max(2q, 8)) about their trend; (None, None) with neither."""
    found: dict[str, float] = {}
    if examples and last:
        p = min(max(_mean(last), 0.0), 1.0)
        found["binomial"] = math.sqrt(p * (1 - p) / examples)
    steps = [b - a for a, b in zip(recent, recent[1:])]
    if len(steps) >= 3:
        centre = _mean(steps)
        found["curve"] = math.sqrt(sum((d - centre) ** 2 for d in steps) / (len(steps) - 1) / 2)
    if not found:
        return None, None
    source = max(found, key=lambda name: found[name])
    return found[source], source


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
