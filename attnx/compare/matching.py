"""Matching, so that a mechanism does not win by being bigger: scale each model's width until a measure of
it is within a tolerance of the baseline's. The measure is the parameter count (the Long Range Arena's
rule, `protocol.match_params`) or the decoding state (MAD's iso-state comparison, Poli et al. 2024,
`protocol.match_state`): the numbers a model keeps per sequence to decode the next token after n tokens,
`CausalLM.state_size(n)`, the sum over its blocks of each mechanism's `Attention.state_size(n)` (softmax
attention's KV cache 2·n·D; linear attention's H·d·(d+1), whatever n). Both are of the model `attnx train`
would build (`AttnxModule`), never estimated; the state is at the task's longest test sequence, and only a
model that decodes token by token (an lm task's) has one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from omegaconf import DictConfig

from attnx import registry
from attnx.compare.plan import Job
from attnx.config.resolved import ResolvedRun, thawed

MAX_SCALE = 8  # widths are searched between 1 and MAX_SCALE times their configured value
# a model's measure at some widths: an int, None when the model declares none, ValueError when it cannot
# be built there (a width the heads do not divide)
Measure = Callable[[ResolvedRun, Any, dict[str, int]], "int | None"]


@dataclass(frozen=True)
class Matched:
    """An arm's widths on a task: its measure at them (None: it declares none) and the baseline's."""

    value: int | None
    target: int
    widths: tuple[tuple[str, int], ...]  # (key, value), the task's width keys
    within: bool  # |value - target| <= tolerance · target

    @property
    def ratio(self) -> float | None:
        return None if self.value is None else self.value / self.target


def with_matched_widths(
    jobs: list[Job], cfg: DictConfig, resolved: Mapping[tuple[str, str], ResolvedRun]
) -> tuple[list[Job], dict[tuple[str, str], Matched], dict[str, str]]:
    """Each job with its arm's matched widths for its task, what matching found per (task, arm), and the
    tasks left at their configured widths with why (under match_state: a model that does not decode, or a
    baseline that declares no state). `resolved`: each (task, arm label)'s run, as compare's checks
    resolved it."""
    state = bool(cfg.protocol.match_state)
    measure, tolerance = (
        (decoding_state, cfg.protocol.state_tolerance)
        if state
        else (parameters, cfg.protocol.param_tolerance)
    )
    matched: dict[tuple[str, str], Matched] = {}
    skipped: dict[str, str] = {}
    for task, spec in cfg.tasks.items():
        arms = list(dict.fromkeys(job.arm for job in jobs if job.task == task))
        baseline = next((arm for arm in arms if arm.label == cfg.baseline), arms[0])
        runs = {arm.label: resolved[(task, arm.label)] for arm in arms}
        built = registry.build("task", runs[baseline.label]["task"])
        if state and not runs[baseline.label].model_type.decodes:
            skipped[task] = f"its {built.model_type} model does not decode token by token, so it has no state"
            continue
        try:
            found = match_widths(runs, built, list(spec.width), baseline.label, tolerance, measure)
        except LookupError as error:
            skipped[task] = str(error)
            continue
        matched.update({(task, label): m for label, m in found.items()})
    chosen = [
        replace(job, widths=matched[(job.task, job.arm.label)].widths)
        if (job.task, job.arm.label) in matched
        else job
        for job in jobs
    ]
    return chosen, matched, skipped


def match_widths(
    runs: Mapping[str, ResolvedRun],
    task: Any,
    keys: Sequence[str],
    baseline: str,
    tolerance: float,
    measure: Measure,
) -> dict[str, Matched]:
    """Per arm label (its resolved run in `runs`), the widths (`keys`, scaled together from their
    configured values) whose measure is closest to the baseline's at its configured widths; the baseline
    keeps its own, and an arm without the measure keeps the configured widths. LookupError when the
    baseline has no measure."""
    if not keys:
        raise ValueError(
            "protocol.match_params and match_state need the task's width keys (its `width:` list)"
        )
    task.setup()  # the vocabularies and lengths: what the embedding, output and state sizes follow
    defaults = [int(_at(runs[baseline].sections, key)) for key in keys]
    target = measure(runs[baseline], task, dict(zip(keys, defaults)))
    if target is None:
        raise LookupError(f"the baseline {baseline} declares no decoding state, so there is none to match")
    found = {}
    for label, run in runs.items():
        configured = dict(zip(keys, defaults))
        if measure(run, task, configured) is None:  # nothing to scale towards the target
            found[label] = Matched(None, target, tuple(configured.items()), False)
            continue
        widths = _closest(partial(measure, run, task), keys, defaults, target)
        value = measure(run, task, widths)
        within = value is not None and abs(value - target) <= tolerance * target
        found[label] = Matched(value, target, tuple(widths.items()), within)
    return found


def model_at(run: ResolvedRun, task: Any, widths: dict[str, int]) -> Any:
    """The model `run` builds for `task` at `widths`; ValueError when it cannot be built there."""
    from attnx.lit import lit_module
    from attnx.train.assemble import model_spec

    sections = thawed(run.sections)
    for key, value in widths.items():
        section, _, field = key.rpartition(".")
        _at(sections, section)[field] = value
    return lit_module(model_spec(run.model_type, sections, task)).model


def _at(node: Any, dotted: str) -> Any:
    """The value at a dotted key of plain data."""
    for part in filter(None, dotted.split(".")):
        node = node[part]
    return node


def parameters(run: ResolvedRun, task: Any, widths: dict[str, int]) -> int:
    """The parameter count of `run`'s model at `widths`."""
    return sum(p.numel() for p in model_at(run, task, widths).parameters())


def test_length(task: Any) -> int:
    """The task's longest test sequence: the n its state is measured at."""
    return int(task.shape().source["test"])


def decoding_state(run: ResolvedRun, task: Any, widths: dict[str, int]) -> int | None:
    """The numbers `run`'s model keeps per sequence after the task's longest test sequence, None when it
    declares none (a model or mechanism without `state_size`)."""
    return state_of(model_at(run, task, widths), test_length(task))


def state_of(model: Any, n: int) -> int | None:
    size = getattr(model, "state_size", None)  # only a decoding model has one (CausalLM)
    return None if size is None else size(n)


def state_bytes(
    jobs: list[Job], resolved: Mapping[tuple[str, str], ResolvedRun]
) -> dict[tuple[str, str], int | None]:
    """Per (task, arm label), the decoding state in bytes per sequence at the task's longest test sequence
    and the arm's widths (numbers times the bytes of the model's parameters); None where the model does not
    decode or declares no state."""
    found: dict[tuple[str, str], int | None] = {}
    tasks: dict[str, Any] = {}
    for job in jobs:
        key = (job.task, job.arm.label)
        if key in found:
            continue
        run = resolved[key]
        if not run.model_type.decodes:
            found[key] = None
            continue
        task = tasks.setdefault(job.task, registry.build("task", run["task"]))
        task.setup()
        found[key] = model_at(run, task, dict(job.widths)).state_bytes(test_length(task))
    return found


def _closest(
    measure: Callable[[dict[str, int]], int | None], keys: Sequence[str], defaults: list[int], target: int
) -> dict[str, int]:
    """Bisect the first key's width (the others scaled with it) for the measure nearest `target`; widths
    the model cannot be built at are stepped over."""

    def widths(first: int) -> dict[str, int]:
        return {k: max(1, round(d * first / defaults[0])) for k, d in zip(keys, defaults)}

    def value(first: int) -> int | None:
        try:
            return measure(widths(first))
        except ValueError:
            return None

    low, high = 1, MAX_SCALE * defaults[0]
    while high - low > 1:  # the measure grows with the width: the first width at or above target
        middle = (low + high) // 2
        found = next((v for v in (value(m) for m in range(middle, high)) if v is not None), None)
        if found is not None and found >= target:
            high = middle
        else:
            low = middle
    scored = [(abs(v - target), w) for w in range(max(1, low - 4), high + 5) if (v := value(w)) is not None]
    return widths(min(scored)[1])
