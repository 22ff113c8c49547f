"""`attnx compare attention=NAME [attention.KEY=V ...] | score=NAME [...] | lm.layers=[...]`: a candidate (a
mechanism, a score, or an lm's per-layer plan, labelled `base_conv+based`) against the classic mechanisms,
on a suite of tasks, over seeds, in one command.

1. The suite (`suite=quick`, conf/suite/) names tasks, each with its `attnx train` overrides. Every
   mechanism of `mechanisms` and the candidate (a score runs inside `score_host`) is an **arm**; an arm
   a task cannot host (`none` as an lm's causal self-attention) is left out with the reason.
2. Fair by construction: every arm of a task trains with the same seeds (`seeds=10`: 0..9, or a list),
   hence the same data order, and `paired_embeddings=true`, hence the same initial embeddings where
   the shapes agree. Every run records whether it converged on the validation twin of its task's
   metric (`convergence.metric`, against the task's `ceiling`): a difference with a side still
   improving is reported as "not converged: raise the budget", never as a win or a loss. With
   `budget_cap` = c > 1 (the quick suite's 4) a run still improving when its budget ends is first
   continued from its checkpoint, a budget at a time, up to c budgets (`attnx.compare.budget`): only a run
   still improving at the cap is not converged, and the report's Budget section gives what each arm used.
   `protocol.lr_search` first trains each arm at every rate of `lr_grid` (first seed, validation only)
   and keeps its best; or `protocol.grid.enabled` (MAD's protocol, Poli et al. 2024) trains every run at
   each (lr, weight_decay) of `protocol.grid` and reads each (task, arm, seed)'s test at the point with the
   best validation metric (`protocol.grid.select=test`: MAD's own best test over the grid, which the
   report labels "optimistic (as MAD)").
   `protocol.match_params` scales each task's `width` keys per arm until its parameter count is within
   `param_tolerance` of the baseline's (the LRA rule); `protocol.match_state` until an lm task's
   decoding state is within `state_tolerance` of it (MAD's iso-state). Refused together: lr_search with
   grid, match_params with match_state.
   A suite task may be a setting of a `capability` (the report's capability table: the mean over its
   settings) and may put the arms at another `site` (`encoder`: `encoder/attention=NAME`).
3. Each phase is one Hydra multirun of exactly its jobs (`hydra/sweeper=plan`, attnx's sweeper), on
   any launcher (`launcher: joblib`, or `hydra/launcher=slurm` on the command line), with
   `resume=auto`: a phase whose runs all completed is not launched again, and an interrupted one
   continues where it stopped (finished runs are skipped, the others resume from their checkpoints).
4. `attnx bench`'s measuring (`attnx.bench.points`) times every arm's mechanism as self-attention at
   `bench.n` tokens, on every launch; the times come back as values (`bench/<arm>/bench.csv` is their
   record, never read back).
5. One report (`attnx.report.cli`): report.html, report.md, report.csv, verdicts.csv in the compare
   folder. Every verdict in it is one decision procedure's (`attnx.report.verdicts`): the candidate against
   each other arm of a task, exact paired test, Holm within each task (`family=task`; `family=suite`: over
   every task), at `alpha` (0.05); a pair that cannot reach it at these seeds is "untestable". Its
   Pareto view sets quality against params, training time and `pareto`: time (inference ms) or state
   (decoding state bytes per sequence at the task's longest test sequence). It says which suite tasks
   pass the discrimination rule (`discrimination.ceiling_fraction`, `discrimination.spread`:
   `attnx.compare.discrimination`): a pair of the classic arms that host attention told apart.

Everything lands in `out` (default `compare/<suite>/<candidate>`): `lr_search/`, `runs/`, `bench/`, and
the report. The same command launched again continues the same compare. `tasks=[a,b]` runs a subset of the
suite's tasks. Every run is first looked up in the run store (`store=auto`, a folder, or null:
`attnx.store.runs`): a run trained once, by any compare, is taken from there, not trained again; `verify=K`
trains K of those again to check (`attnx.compare.verify`). While a phase runs it prints a line per finished
run (`attnx.compare.progress`); `plan=true` (`--plan`) prints what it would train instead
(`attnx.compare.preview`).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from attnx import registry
from attnx.compare.budget import adopt, check_schedule, follow
from attnx.compare.checks import check_alone, check_arms, check_runs
from attnx.compare.keys import check_keys
from attnx.compare.matching import Matched, state_bytes, with_matched_widths
from attnx.compare.phases import inference_ms, launch, mechanism_of
from attnx.compare.plan import Arm, final_jobs, search_jobs, with_best_rates
from attnx.compare.verify import verify
from attnx.config.compose import ConfigError, one_line, search_path_override
from attnx.models import plan
from attnx.report.document import slug

CANDIDATE_KEYS = ("attention", "score")  # with their fields: what names the candidate; or an lm plan
OWN = {  # run keys compare sets itself, and how to say what you meant instead
    "seed": "seeds come from the suite: seeds=8 or seeds=[0,1,2]",
    "resume": "it always resumes: resume=auto",
    "hydra.sweep.dir": "its folder is out=DIR",
    "hydra/sweeper": "its plan of runs",
    "paired_embeddings": "the arms of a seed share its initial embeddings",
    "convergence.metric": "each run's is the val/ twin of its suite task's metric",
    "convergence.ceiling": "a suite task's `ceiling:` sets it for that task's runs",
}
COMPARE_KEYS = (
    "suite",
    "seeds",
    "mechanisms",
    "baseline",
    "score_host",
    "launcher",
    "tasks",
    "protocol",
    "bench",
    "pareto",
    "out",
    "discrimination",
    "alpha",
    "family",
    "store",
    "verify",
    "budget_cap",
    "plan",
)


@dataclass
class Request:
    """The command line, split: compare's own overrides, the candidate's, and the runs' (passed on)."""

    compare: list[str]
    candidate: list[str]
    runs: list[str]


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    try:
        registry.load_all()
        request = split(argv)
        chosen, request.compare = narrowing(request.compare)
        cfg = compose_compare(request.compare)
        left_out = narrow(cfg, chosen, suite_name(request.compare))
        check_keys(cfg)
        check_alone(cfg, request.compare, request.candidate)
        suite = suite_name(request.compare)
        check_runs(cfg, request.runs, suite)
        candidate = candidate_arm(cfg, request.candidate)
        arms = [Arm(m, (f"attention={m}",)) for m in cfg.mechanisms if m != candidate.label] + [candidate]
        out = Path(cfg.out or Path("compare") / suite / slug(candidate.label))
        hosted, refused, resolved = check_arms(cfg, arms, request.runs)
        check_schedule(cfg, resolved)
    except (ConfigError, registry.RegistryError, registry.PluginImportError) as error:
        print(f"attnx compare: {error}", file=sys.stderr)
        return 2
    # one compile cache for both phases: a configuration compiles once per compare (attnx.train.compile_cache)
    cache = (
        []
        if any(o.startswith("compile_cache=") for o in request.runs)
        else [f"compile_cache={out / 'compile_cache'}"]
    )
    quiet = ["summary=false"]  # a line per run from compare itself (compare.progress), not each run's table
    runs = [
        *request.runs,
        *launcher_override(cfg, request.runs),
        "resume=auto",
        *cache,
        *store_override(cfg),
        *quiet,
    ]
    print(
        f"attnx compare: {candidate.label} on suite {suite} ({', '.join(cfg.tasks)}), into {out}", flush=True
    )
    failed = 0
    jobs = final_jobs(cfg, hosted)
    search = search_jobs(cfg, hosted) if cfg.protocol.lr_search else []
    if search and not cfg.plan:
        failed += launch(out / "lr_search", cfg, search, runs, search=True)
        jobs = with_best_rates(jobs, search, out / "lr_search", cfg)
    matched: dict[tuple[str, str], Matched] = {}
    unmatched: dict[str, str] = {}
    if cfg.protocol.match_params or cfg.protocol.match_state:
        jobs, matched, unmatched = with_matched_widths(jobs, cfg, resolved)
    if cfg.plan:
        from attnx.compare.preview import preview
        from attnx.store.runs import root_of

        print(preview(cfg, jobs, search, runs, root_of(cfg.store)))
        return 0
    jobs = adopt(out / "runs", cfg, jobs, runs, resolved)
    failed += launch(out / "runs", cfg, jobs, runs)
    jobs, continued = follow(out / "runs", cfg, jobs, runs, resolved)
    failed += continued
    differ = verify(out, cfg, jobs, runs)
    if differ:
        print(
            f"attnx compare: verify={cfg.verify}: the run store's numbers differ from training them again:",
            file=sys.stderr,
        )
        print("\n".join(f"  {line}" for line in differ), file=sys.stderr)
        failed += len(differ)
    bench_ms = inference_ms(out / "bench", cfg, arms)
    state = state_bytes(jobs, resolved) if cfg.pareto == "state" else None
    from attnx.compare.report import CompareStudy, write_report
    from attnx.nn.attention import hosts_attention

    mechanisms = {arm.label: mechanism_of(arm) for arm in arms}  # None: a plan's arm, no one mechanism
    attending = {
        label for label, m in mechanisms.items() if m and hosts_attention(registry.get("attention", m[0]))
    }
    study = CompareStudy(
        out,
        cfg,
        suite,
        candidate,
        jobs,
        search,
        refused,
        matched,
        bench_ms,
        ["attnx compare", *argv],
        unmatched,
        state,
        attending,
        left_out,
    )
    written = write_report(study)
    print(f"attnx compare: wrote {', '.join(map(str, written))}")
    return 1 if failed else 0


def split(argv: list[str]) -> Request:
    """Compare's keys, the candidate's (`attention`, `score`, their fields) and the rest (Hydra's grammar)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    argv = ["plan=true" if a == "--plan" else a for a in argv]  # the flag is the key's other spelling
    flags = [a for a in argv if a.startswith("-")]
    if flags:
        raise ConfigError(
            f"{flags[0]}: attnx compare takes overrides only (KEY=VALUE); see attnx compare --help"
        )
    try:
        parsed = OverridesParser.create().parse_overrides(argv)
    except Exception as error:
        raise ConfigError(one_line(error)) from error
    request = Request([], [], [])
    for override, text in zip(parsed, argv):
        key = override.key_or_group.lstrip("+~")
        if override.is_sweep_override():
            raise ConfigError(f"{text}: compare sweeps its mechanisms and seeds itself; give one value")
        if key.split(".")[0] in COMPARE_KEYS:
            request.compare.append(text)
        elif key.split(".")[0] in CANDIDATE_KEYS or key == plan.KEY:
            request.candidate.append(text)
        elif key == "resume" and override.value() == "auto":
            continue  # what every compare does: finished runs are skipped, interrupted ones resume
        elif key in OWN or key.startswith("hydra.sweeper"):
            raise ConfigError(f"{text}: attnx compare sets {key} itself ({OWN.get(key, 'its plan of runs')})")
        else:
            request.runs.append(text)
    if not request.candidate:
        raise ConfigError("name the candidate: attention=NAME (a mechanism) or score=NAME (a score)")
    return request


def narrowing(compare: list[str]) -> tuple[list[str] | None, list[str]]:
    """`tasks=[a,b]` or `tasks=a` (a subset of the suite's tasks to run) apart from compare's other overrides;
    a `tasks.NAME...` override edits the suite and stays."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    chosen, rest = None, []
    for override, text in zip(OverridesParser.create().parse_overrides(compare), compare):
        value = override.value()
        if override.key_or_group == "tasks" and isinstance(value, (list, str)):
            chosen = [value] if isinstance(value, str) else [str(name) for name in value]
        else:
            rest.append(text)
    return chosen, rest


def narrow(cfg: DictConfig, chosen: list[str] | None, suite: str) -> list[str]:
    """The suite's tasks cut to `chosen` (`tasks=[...]`); the names left out."""
    if chosen is None:
        return []
    if not chosen:
        raise ConfigError("tasks=[]: name at least one of the suite's tasks, or leave tasks= out")
    unknown = [name for name in chosen if name not in cfg.tasks]
    if unknown:
        raise ConfigError(
            f"tasks={chosen}: {unknown[0]} is not a task of suite {suite}; its tasks: {', '.join(cfg.tasks)}"
        )
    left_out = [name for name in cfg.tasks if name not in chosen]
    with open_dict(cfg):
        for name in left_out:
            del cfg.tasks[name]
    return left_out


def compose_compare(overrides: list[str]) -> DictConfig:
    """conf/compare.yaml with its suite, typed by `CompareConfig`; Hydra's errors in one line."""
    import hydra

    from attnx.config.compose import CONF_DIR

    try:
        with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = hydra.compose("compare", [*overrides, *search_path_override()])
    except Exception as error:
        missing = re.search(r"Could not find 'suite/([^']+)'", str(error))
        if missing:
            from attnx.config.compose import group_options

            options = group_options({"suite"}, "compare").get("suite", [])
            raise ConfigError(registry.unknown_message("suite", missing.group(1), options)) from None
        raise ConfigError(one_line(error)) from error
    unset = sorted(k for k in OmegaConf.missing_keys(cfg) if not k.startswith("tasks."))  # theirs: check_keys
    if unset:
        raise ConfigError(f"missing value for {', '.join(unset)}: set it in the suite or on the command line")
    return cfg


def suite_name(overrides: list[str]) -> str:
    chosen = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == "suite"]
    return chosen[-1] if chosen else "quick"


def candidate_arm(cfg: DictConfig, overrides: list[str]) -> Arm:
    """The candidate's arm: its overrides as given; a score alone runs inside `score_host`; an lm plan
    (`lm.layers=[...]`) labelled by its layers' mechanisms (`base_conv+based`)."""
    chosen = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "." not in o.split("=", 1)[0]}
    planned = [o for o in overrides if o.split("=", 1)[0] == plan.KEY]
    if planned:
        if chosen:
            raise ConfigError(
                f"{planned[-1]}: a plan names each layer's mechanism and score; drop {next(iter(chosen))}="
            )
        return Arm(plan_label(planned[-1]), tuple(overrides), candidate=True)
    if "attention" in chosen:
        name = registry.registry("attention").canonical(chosen["attention"])
        label = name if "score" not in chosen else f"{name}+{chosen['score']}"
        return Arm(label, tuple(overrides), candidate=True)
    if "score" not in chosen:
        raise ConfigError(f"{overrides[0]}: set attention=NAME or score=NAME first")
    score = registry.registry("score").canonical(chosen["score"])
    return Arm(f"{cfg.score_host}+{score}", (f"attention={cfg.score_host}", *overrides), candidate=True)


def plan_label(override: str) -> str:
    """`base_conv+based`: an lm plan's mechanisms by their registered names (as given where unknown:
    the arm's validation names the layer)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    layers = OverridesParser.create().parse_override(override).value()
    if not isinstance(layers, list) or not all(isinstance(x, dict) and "name" in x for x in layers):
        raise ConfigError(f"{override}: a plan is a list of attention sections, e.g. [{{name:linear}}]")
    names = registry.registry("attention")
    return plan.label([names.canonical(x["name"]) if x["name"] in names else x["name"] for x in layers])


def store_override(cfg: DictConfig) -> list[str]:
    """Every run's `store=`: the store's folder as every worker must find it (`auto` resolved here)."""
    from attnx.store.runs import root_of

    root = root_of(cfg.store)
    return [] if root is None else [f"store={root.resolve()}"]


def launcher_override(cfg: DictConfig, runs: list[str]) -> list[str]:
    return [] if any(o.startswith("hydra/launcher=") for o in runs) else [f"hydra/launcher={cfg.launcher}"]
