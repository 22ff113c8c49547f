"""The verdicts of a fabricated finished compare (run folders with results.json, no training), in every place
a report mentions a pair: the compare report's paired table, win/tie/loss matrix, ranking and verdicts.csv,
in Markdown, HTML and CSV, and `attnx report --baseline` on the same runs. The pairs have known outcomes:
a win at every seed, a tie, a noisy difference that only the adjustment stops, a side still improving, and
equal differences (no d_z). Also: which tasks pass the discrimination rule (attention arms told apart, not
a pooling failure), each configuration's convergence, no inf or 1e15 anywhere, and the grid read at the
point validation chose."""

from __future__ import annotations

import csv
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from attnx.cli import main as cli
from attnx.compare.plan import Arm, Job
from attnx.compare.report import CompareStudy, write_report
from attnx.track.results import write_results

SEEDS = range(10)  # the quick suite's: 5 comparisons per task, floor 5·2/2^10 = 0.0098
CANDIDATE = "local_window"
CLASSIC = ("additive", "dot", "multi_head", "none", "fixed_c")
NOISY = [0.02, 0.02, 0.02, 0.02, 0.02, 0.02, -0.01, 0.02, -0.005, -0.01]  # raw p 0.043, Holm 0.21
TIE = [0.004, -0.004, 0.003, -0.003, 0.002, -0.002, 0.001, -0.001, 0.0005, -0.0005]


def scores(task: str, arm: str, seed: int) -> tuple[float, bool]:
    """(test metric, converged) of one run. On align the candidate c_s meets: additive, worse at every
    seed (a win); dot, a tie; none, a noisy difference; multi_head, still improving; fixed_c, exactly 0.1
    below at every seed (equal differences). On pool every attention arm is at the ceiling and only
    fixed_c (pooling without attention) falls short."""
    c = 0.96 + 0.003 * (seed % 4)
    if task == "align":
        found = {
            CANDIDATE: c,
            "additive": c - 0.08 - 0.001 * (seed % 3),
            "dot": c + TIE[seed],
            "none": c - NOISY[seed],
            "multi_head": c - 0.01,
            "fixed_c": c - 0.1,
        }
        return found[arm], not (arm == "multi_head" and seed == 3)
    pool = {CANDIDATE: 0.6, "additive": 0.997, "dot": 0.996, "multi_head": 0.998, "none": 0.995}
    return pool.get(arm, 0.77) + 0.0005 * (seed % 2), True


def record(task: str, arm: str, seed: int, score: float, converged: bool, val: float | None = None) -> dict:
    share = {"higher_is_better": True, "ceiling": 1.0}
    return {
        "status": "completed",
        "overrides": [f"task={task}", f"attention={arm}", f"seed={seed}"],
        "choices": {"task": task, "encoder": "rnn", "attention": arm, "score": None},
        "config": {"seed": seed},
        "model_type": "classification",
        "metric_declarations": {"val/acc": share, "test/acc": share},
        "metrics": {"test/acc": score, "val/acc": score if val is None else val},
        "params": 1000,
        "train_seconds": 1.0,
        "convergence": {
            "metric": "val/acc",
            "tolerance": 0.005,
            "ceiling": 1.0,
            "validations": 12,
            "improvement": 0.0 if converged else 0.05,
            "noise_source": "binomial",
            "converged": converged,
            "reason": "plateaued" if converged else "still improving",
        },
    }


def suite(**more: Any) -> Any:
    task = {"metric": "test/acc", "overrides": ["task=synthetic"], "ceiling": None}
    return OmegaConf.create(
        {
            "tasks": {"align": task, "pool": task},
            "seeds": list(SEEDS),
            "mechanisms": list(CLASSIC),
            "baseline": "additive",
            "bench": {"n": 16},
            "protocol": {"lr_search": False, "match_params": False},
            "discrimination": {"ceiling_fraction": 0.95, "spread": 0.05},
            "alpha": 0.05,
            "family": "task",
            **more,
        }
    )


ARMS = {label: Arm(label, (f"attention={label}",), label == CANDIDATE) for label in (*CLASSIC, CANDIDATE)}
ATTENDING = {"additive", "dot", "multi_head", CANDIDATE}  # none and fixed_c host no attention


@pytest.fixture(scope="module")
def compare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compare")
    jobs = [Job(task, ARMS[arm], seed) for task in ("align", "pool") for arm in ARMS for seed in SEEDS]
    for i, job in enumerate(jobs):
        write_results(
            out / "runs" / str(i),
            record(job.task, job.arm.label, job.seed, *scores(job.task, job.arm.label, job.seed)),
        )
    study = CompareStudy(
        out, suite(), "tiny", ARMS[CANDIDATE], jobs, [], {}, {}, {}, ["attnx compare"], attending=ATTENDING
    )
    write_report(study)
    return out


# the candidate against each classic arm on align: (outcome, verdict words)
EXPECTED = {
    "additive": ("W", "better"),
    "dot": ("T", "no significant difference"),
    "none": ("T", "no significant difference"),
    "multi_head": ("NC", "not converged: raise the budget"),
    "fixed_c": ("W", "better"),
}
MIRROR = {"W": "L", "L": "W", "T": "T", "NC": "NC", "U": "U"}


class Tables(HTMLParser):
    """The HTML page's tables by id: header and rows of cell texts."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.found: dict[str, list[list[str]]] = {}
        self.current: list[list[str]] | None = None
        self.cell: list[str] | None = None
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        ident = dict(attrs).get("id")
        if tag == "table":
            self.current = self.found.setdefault(ident or f"_{len(self.found)}", [])
        elif tag == "tr" and self.current is not None:
            self.current.append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None and self.current is not None:
            self.current[-1].append("".join(self.cell).strip())
            self.cell = None
        elif tag == "table":
            self.current = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def md_rows(markdown: str, section: str) -> list[list[str]]:
    part = markdown.split(f"## {section}")[1].split("\n## ")[0]
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in part.splitlines()
        if line.startswith("|")
    ]


def by_header(rows: list[list[str]], first: str) -> list[dict[str, str]]:
    """The rows of the table whose header starts with `first`, as dicts."""
    start = next(i for i, r in enumerate(rows) if r and r[0] == first)
    header, found = rows[start], []
    for r in rows[start + 1 :]:
        if len(r) != len(header) or r[0] == first:
            break
        if not set(r[0]) <= {"-", ":"}:
            found.append(dict(zip(header, r)))
    return found


def test_every_place_the_compare_report_mentions_a_pair_gives_the_procedure_s_verdict(compare: Path) -> None:
    md = (compare / "report.md").read_text()
    pairs = {r["pair"]: r for r in by_header(md_rows(md, "Statistics"), "cell") if r["cell"] == "task=align"}
    with (compare / "verdicts.csv").open() as handle:
        csv_rows = {(r["task"], r["mechanism a"], r["mechanism b"]): r for r in csv.DictReader(handle)}
    tables = Tables((compare / "report.html").read_text()).found
    html_pairs = {r[1]: r for r in tables["pairs"][1:] if r[0] == "task=align"}
    html_header = tables["pairs"][0]
    md_matrix = md.split("*task=align*")[1].split("*task=pool*")[0]
    matrix = {r[0]: r for r in (md_rows("## x" + md_matrix, "x")) if r[0] in ARMS}
    columns = next(r for r in md_rows("## x" + md_matrix, "x") if r[0] == "mechanism")
    html_matrix = {r[0]: r for r in tables["matrix-task_align"][1:]}
    for arm, (outcome, words) in EXPECTED.items():
        row = pairs[f"{CANDIDATE} − {arm}"]
        assert row["family"] == "family" and row["m"] == "5" and row["floor"] == "0.0098", arm
        assert row["verdict"] == words, arm
        assert html_pairs[f"{CANDIDATE} − {arm}"][html_header.index("verdict")] == words, arm
        found = csv_rows[("align", CANDIDATE, arm)]
        assert (found["outcome"], found["verdict"], found["family"]) == (outcome, words, "family"), arm
        assert matrix[CANDIDATE][columns.index(arm)] == outcome, arm
        assert matrix[arm][columns.index(CANDIDATE)] == MIRROR[outcome], arm
        assert html_matrix[CANDIDATE][columns.index(arm)] == outcome, arm
    noisy = csv_rows[("align", CANDIDATE, "none")]
    assert float(noisy["p"]) < 0.05 <= float(noisy["p_holm"])  # a win unadjusted: not after Holm
    equal = pairs[f"{CANDIDATE} − fixed_c"]
    assert equal["d_z"] == "undefined: equal differences (sd 0)" and equal["Δ"] == "+0.100"
    assert csv_rows[("align", CANDIDATE, "fixed_c")]["d_z"] == ""  # empty, never inf or 1e15
    # the classic arms' pairs are context, decided by the same procedure with their own Holm family
    context = csv_rows[("align", "dot", "additive")]
    assert context["family"] == "context" and context["m"] == "10" and context["outcome"] == "W"
    # the ranking's tally is the count of those verdicts, both tasks together
    ranking = {r["mechanism"]: r for r in by_header(md_rows(md, "Ranking"), "mechanism")}
    outcomes = [r["outcome"] for (_, a, b), r in csv_rows.items() if a == CANDIDATE] + [
        MIRROR[r["outcome"]] for (_, a, b), r in csv_rows.items() if b == CANDIDATE
    ]
    tally = "/".join(str(outcomes.count(o)) for o in ("W", "T", "L", "NC", "U"))
    assert ranking[CANDIDATE]["W/T/L/NC/U"] == tally
    assert "smallest adjusted p is m·2/2ⁿ for m comparisons: align: m = 5, floor 5·2/2^10 = 0.0098" in md


def test_attnx_report_on_the_same_runs_gives_the_same_verdicts(compare: Path, tmp_path: Path) -> None:
    """`attnx report --baseline attention=CANDIDATE`: the same family (the candidate against each other
    value of a cell, a task), so the same verdict for every pair as the compare's."""
    assert (
        cli(["report", str(compare / "runs"), "--baseline", f"attention={CANDIDATE}", "--out", str(tmp_path)])
        == 0
    )
    with (tmp_path / "verdicts.csv").open() as handle:
        mine = {
            (r["task"], frozenset((r["attention a"], r["attention b"]))): r for r in csv.DictReader(handle)
        }
    with (compare / "verdicts.csv").open() as handle:
        theirs = {
            (r["task"], frozenset((r["mechanism a"], r["mechanism b"]))): r for r in csv.DictReader(handle)
        }
    assert set(mine) == set(theirs)
    for key, r in mine.items():
        flipped = r["attention a"] != theirs[key]["mechanism a"]
        assert (MIRROR[r["outcome"]] if flipped else r["outcome"]) == theirs[key]["outcome"], key
        assert (r["family"], r["p_holm"]) == (theirs[key]["family"], theirs[key]["p_holm"]), key
    md = (tmp_path / "report.md").read_text()
    row = next(
        r for r in by_header(md_rows(md, "Statistics"), "cell") if r["pair"] == f"additive − {CANDIDATE}"
    )
    assert (
        row["verdict"] == "worse"
    )  # the report shows row − baseline: the candidate's win, seen from additive


def test_no_report_file_prints_inf_nan_or_a_huge_number(compare: Path) -> None:
    for name in ("report.md", "report.html", "report.csv", "verdicts.csv"):
        found = (compare / name).read_text()
        found = re.sub(r"data:image/png;base64,[^\"]+", "", found)
        assert not re.search(r"(?<![A-Za-z])-?(inf|nan)(?![A-Za-z])", found, re.IGNORECASE), name
        assert not re.search(r"\d[eE]\+?\d\d", found), name  # 5.9e15, 1e+16


def test_the_discrimination_rule_counts_attention_arms_and_convergence_is_shown(compare: Path) -> None:
    md = re.sub(" +", " ", (compare / "report.md").read_text())
    rule = {r["task"]: r for r in by_header(md_rows(md, "Discrimination"), "task")}
    assert rule["align"]["verdict"] == "passes" and rule["align"]["(a) best settled"].startswith("dot 0.9")
    assert rule["align"]["(b) told apart"].startswith("dot − additive +0.08")
    # pool: fixed_c is 0.22 below the rest, as sentiment's once passed; its attention arms are 0.003 apart
    assert rule["pool"]["verdict"].startswith("fails: (b) no pair of attention arms told apart by >= 0.05")
    assert "none, fixed_c host no attention" in md.replace("fixed_c, none", "none, fixed_c")
    convergence = {r["mechanism"]: r for r in by_header(md_rows(md, "Convergence"), "mechanism")}
    assert convergence["multi_head"]["align"] == "still improving (1 of 10)"
    assert "0.954* [" in md.split("## Ranking")[1].split("##")[0]  # multi_head on align, marked


SENTINEL = 0.987654  # point 1's test metric: the best test, never chosen on validation


def grid_record(task: str, arm: str, seed: int, point: int) -> dict[str, Any]:
    """Two grid points per run: point 0 has the better validation metric, point 1 the better test metric,
    whose figures (0.9876..) must never reach a report read on validation."""
    if point == 0:
        return record(task, arm, seed, scores(task, arm, seed)[0], True, val=0.9)
    return record(task, arm, seed, SENTINEL + seed * 1e-6, True, val=0.5)


@pytest.mark.parametrize("select", ["validation", "test"])
def test_under_the_grid_test_is_read_only_at_the_point_validation_chose(tmp_path: Path, select: str) -> None:
    jobs = [
        Job("align", ARMS[arm], seed, lr=lr, weight_decay=0.0)
        for arm in ("additive", CANDIDATE)
        for seed in SEEDS
        for lr in (0.001, 0.01)
    ]
    for i, job in enumerate(jobs):
        point = int(job.lr == 0.01)
        write_results(tmp_path / "runs" / str(i), grid_record(job.task, job.arm.label, job.seed, point))
    grid = {"enabled": True, "lr": [0.001, 0.01], "weight_decay": [0.0], "select": select}
    cfg = suite(mechanisms=["additive"], protocol={"lr_search": False, "match_params": False, "grid": grid})
    cfg.tasks = {"align": cfg.tasks.align}
    study = CompareStudy(tmp_path, cfg, "tiny", ARMS[CANDIDATE], jobs, [], {}, {}, {}, ["attnx compare"])
    write_report(study)
    names = ("report.md", "report.html", "report.csv", "verdicts.csv")
    written = {name: (tmp_path / name).read_text() for name in names}
    means = {r[0]: r for r in md_rows(written["report.md"], "Ranking") if r[0] in ARMS}
    if select == "validation":
        assert means[CANDIDATE][1].startswith("0.964 [")  # c_s's mean: point 0, chosen on validation
        assert not any("0.9876" in text for text in written.values())  # point 1's test: never read
        assert "optimistic (as MAD)" not in written["report.md"]
        assert "lr=0.001 wd=0 (10)" in written["report.md"]
    else:
        assert means[CANDIDATE][1].startswith("0.988 [")  # MAD's best test over the grid: point 1
        assert "optimistic (as MAD)" in written["report.md"] and "lr=0.01 wd=0 (10)" in written["report.md"]
