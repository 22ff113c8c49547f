"""The command lines README.md shows, the outputs it shows, and how to run an `attnx train` line small:
shared by test_readme_commands.py.

A line is every command of a fenced `bash` block (a `\\` continuation joined, `#` comments dropped) and every
`$ command` of a `text` block, with the lines printed beneath it as its expected output. A sample output is
a `text` block with no `$ command` (a command's printed output, generated from a results file by
benchmarks/publish.py): `sample_outputs` names each by the results block that holds it.
"""

from __future__ import annotations

import itertools
import math
import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))

# Sizes of a tiny run: 48 training examples in batches of 16 are an epoch of 3 steps, and every run stops
# after MAX_STEPS, before its first validation (the case that failed every run: issue 29).
MAX_STEPS = 2
SIZES = {"train_size": 48, "val_size": 16, "test_size": 16, "batch_size": 16}
# Widths by field name, wherever a section of the composed config has the field (encoder, decoder, lm,
# their attention slots); a field at 0 (an lm's attention-only blocks) stays 0.
WIDTHS = {"embed_dim": 8, "hidden_dim": 16, "d_model": 16, "ff_dim": 16, "num_layers": 1}
WIDTH_SECTIONS = ("encoder", "decoder", "lm")
# A sweep of at most this many jobs runs as written; a larger one runs as a sweep of at most this many
# (shrunk); every value of every sweep is composed in any case.
MAX_SWEEP = 3


@dataclass(frozen=True)
class Line:
    """One command of the README: its words, and for a `$ command` of a text block what it prints."""

    words: tuple[str, ...]
    expected: str | None = None

    def __str__(self) -> str:
        return shlex.join(self.words)

    @property
    def command(self) -> tuple[str, ...]:
        """`attnx train`, `attnx report`, `make`, ...: the program and its subcommand."""
        return self.words[:2] if self.words[0] == "attnx" else self.words[:1]


def readme_lines(text: str | None = None) -> list[Line]:
    """Every command line of the README's fenced `bash` and `text` blocks, in order, without repeats."""
    text = README.read_text() if text is None else text
    lines: list[Line] = []
    for language, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if language == "bash":
            for line in re.sub(r"\\\n", " ", body).splitlines():
                words = shlex.split(line, comments=True)
                if words:
                    lines.append(Line(tuple(words)))
        elif language == "text":
            for command, output in re.findall(r"^\$ (.*)\n((?:(?!\$ ).*\n?)*)", body, re.M):
                lines.append(Line(tuple(shlex.split(command)), output.strip()))
    return list(dict.fromkeys(lines))


def sample_outputs(text: str | None = None) -> list[tuple[str | None, str]]:
    """Each `text` block without a `$ command`: (the `FILE VIEW` of the results block it is in, or None;
    its text)."""
    text = README.read_text() if text is None else text
    found = []
    for match in re.finditer(r"^```text\n(.*?)^```", text, re.S | re.M):
        if re.search(r"^\$ ", match[1], re.M):
            continue
        marker = re.search(r"<!-- results: (.*?) -->\n$", text[: match.start()])
        found.append((marker[1] if marker else None, match[1].strip()))
    return found


def train_lines() -> list[Line]:
    """The README's `attnx train` lines, then `attnx train -m experiment=NAME` for each shipped experiment
    the README does not show."""
    lines = [line for line in readme_lines() if line.command == ("attnx", "train") and line.expected is None]
    shown = {w.split("=", 1)[1] for line in lines for w in line.words if w.startswith("experiment=")}
    unshown = [name for name in EXPERIMENTS if name not in shown]
    return lines + [Line(("attnx", "train", "-m", f"experiment={name}")) for name in unshown]


def overrides(line: Line) -> list[str]:
    """The line's overrides (`key=value`, `~key`), without `attnx train` and Hydra's flags."""
    return [w for w in line.words[2:] if not w.startswith("-") and ("=" in w or w.startswith("~"))]


def flags(line: Line) -> list[str]:
    return [w for w in line.words[2:] if w not in overrides(line)]


def multirun(line: Line, cfg: DictConfig) -> bool:
    """`-m`, or a config that asks for a multirun itself (`hparams_search=optuna`: `hydra.mode`)."""
    return "-m" in line.words or "--multirun" in line.words or str(cfg.hydra.mode) == "RunMode.MULTIRUN"


def sweeps(line: Line, cfg: DictConfig) -> list[str]:
    """The line's swept values as overrides: the basic sweeper's `hydra.sweeper.params` (an experiment's),
    then the command line's comma lists, which win for the same key."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    swept = {key: f"{key}={value}" for key, value in params.items() if "," in str(value)}
    for override in OverridesParser.create().parse_overrides(overrides(line)):
        key = override.get_key_element()
        if override.is_sweep_override():
            swept[key] = override.input_line
        else:
            swept.pop(key, None)  # a single value on the command line fixes an experiment's sweep
    return list(swept.values())


def shrunk(line: Line, cfg: DictConfig, keep: Collection[str] = ()) -> dict[str, list[str]]:
    """The line's sweeps (key -> values) cut to at most MAX_SWEEP jobs: all of it when it is that small;
    else each key of `keep` (the keys a report of the sweep reads) takes two of its values, and each other
    swept key in order as many as keep those keys within MAX_SWEEP jobs (at least its first)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(sweeps(line, cfg))
    values = {o.get_key_element(): list(o.sweep_string_iterator()) for o in parsed}
    if math.prod(len(v) for v in values.values()) <= MAX_SWEEP:
        return values
    chosen = {key: values[key][:2] for key in values if key in keep}
    budget = MAX_SWEEP // math.prod(len(v) for v in chosen.values())
    for key in values:
        if key not in keep:
            chosen[key] = values[key][: max(1, budget)]
            budget //= len(chosen[key])
    return {key: chosen[key] for key in values}


def varying(line: Line, cfg: DictConfig, keys: Collection[str]) -> set[str]:
    """The line's swept keys that change one of `keys` in the composed config: the keys themselves, and a
    group that sets them (`mqar=len128_pairs8` sets `task.seq_len`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from attnx.config.compose import compose

    parsed = OverridesParser.create().parse_overrides(sweeps(line, cfg))
    values = {o.get_key_element(): list(o.sweep_string_iterator()) for o in parsed}
    first = {key: options[0] for key, options in values.items()}

    def config(choice: dict[str, str]) -> DictConfig:
        return compose([*pinned(line, cfg), *(f"{key}={value}" for key, value in choice.items())])

    base, found = config(first), {key for key in values if key in keys}
    for key in [k for k in values if k not in found]:
        other = config(first | {key: values[key][1]})
        if any(OmegaConf.select(other, k) != OmegaConf.select(base, k) for k in keys):
            found.add(key)
    return found


def planned(cfg: DictConfig) -> list[list[str]] | None:
    """The jobs of an experiment's inline plan (`hydra/sweeper=plan`, `hydra.sweeper.plan: [...]`)."""
    plan = OmegaConf.select(cfg, "hydra.sweeper.plan")
    return [list(job) for job in plan] if OmegaConf.is_list(plan) else None


def jobs(sweep: dict[str, list[str]]) -> list[list[str]]:
    """Every job of a sweep, each as the overrides fixing its keys."""
    return [list(job) for job in itertools.product(*([f"{k}={v}" for v in vs] for k, vs in sweep.items()))]


def pinned(line: Line, cfg: DictConfig) -> list[str]:
    """The line's overrides that every job of its sweep shares."""
    swept = sweeps(line, cfg)
    return [o for o in overrides(line) if o not in swept]


def tiny(line: Line, cfg: DictConfig) -> list[str]:
    """Overrides that make the line's run tiny without changing what it compares: the task's sizes, the
    widths of its sections, MAX_STEPS, no heatmaps, one Optuna trial, one joblib worker. Keys the line sets
    or sweeps (itself or in its experiment) stay its own."""
    mine = {o.split("=", 1)[0].lstrip("+~") for o in [*overrides(line), *sweeps(line, cfg)]}
    chosen = {f"task.{key}": value for key, value in SIZES.items() if key in cfg.task}
    for section in WIDTH_SECTIONS:
        for path, value in _fields(OmegaConf.to_container(cfg[section]) if cfg.get(section) else {}, section):
            name = path.rsplit(".", 1)[-1]
            if name in WIDTHS and isinstance(value, int) and value > 0:
                chosen[path] = WIDTHS[name]
    for section in WIDTH_SECTIONS:
        plan = OmegaConf.select(cfg, f"{section}.layers")
        if plan and f"{section}.num_layers" in chosen:  # a plan's length divides num_layers: the plan once
            chosen[f"{section}.num_layers"] = len(plan)
    chosen |= {"trainer.max_steps": MAX_STEPS, "callbacks.attention_heatmaps": "null"}
    tiny = [f"{key}={value}" for key, value in chosen.items() if key not in mine]
    plan = planned(cfg)
    if plan is not None:  # a job may choose a per-layer plan (lm=based) whose length num_layers must keep
        tiny = [o for o in tiny if not o.split("=", 1)[0].endswith(".num_layers")]
    if plan is not None and len(plan) > MAX_SWEEP:  # a budget, as n_trials: MAX_SWEEP jobs spread over it
        cut = [plan[i] for i in range(0, len(plan), len(plan) // MAX_SWEEP)][:MAX_SWEEP]
        tiny.append(f"hydra.sweeper.plan=[{','.join('[' + ','.join(map(repr, job)) + ']' for job in cut)}]")
    if "optuna" in str(OmegaConf.select(cfg, "hydra.sweeper._target_")):
        tiny.append("hydra.sweeper.n_trials=1")  # a budget, not a choice: the line's 50 trials become 1
    joblib = "joblib" in str(OmegaConf.select(cfg, "hydra.launcher._target_"))
    if joblib and "hydra.launcher.n_jobs" not in mine:
        # one worker process, not one per core: the suite's two pytest workers have the cores, and each
        # joblib worker pays attnx's and Lightning's imports before its first job
        tiny.append("hydra.launcher.n_jobs=1")
    return tiny


def _fields(node: object, prefix: str) -> list[tuple[str, object]]:
    """(dotted key, value) of every leaf under a plain config section."""
    if isinstance(node, dict):
        return [field for key, value in node.items() for field in _fields(value, f"{prefix}.{key}")]
    return [(prefix, node)]
