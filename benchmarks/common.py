"""What every benchmark script shares: arguments, the machine, round budgets, and its results file.

Speeds are ratios against a reference timed in the same process, interleaved round by round
(attnx.bench.measure.interleaved), so that load from other processes on a shared machine cancels.

Every script ends with `record(args, tables=..., values=..., headlines=...)`: it prints the tables and
writes them to `benchmarks/results/<script>.json` (`--results PATH` elsewhere, e.g. for a trial run) with
what a reader needs to trust them: the exact command, the date, the commit (and whether the tree had
uncommitted changes), the machine (CPU, cores, RAM, GPU, Python, torch, Lightning, threads), the load
average before and after, and the wall time. `benchmarks/publish.py` renders the documents' tables and
numbers from these files; tests/unit/test_published.py fails when a document disagrees with them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from attnx.bench.measure import time_once
from attnx.table import markdown_table
from attnx.tasks.base import Batch

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
# what cannot change a measurement, so does not make its tree dirty: what benchmarks write, and documents
WRITTEN = ("benchmarks/results/", "docs/")

_started: dict[str, Any] = {}


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (train.yaml's default: 1)")
    p.add_argument("--budget", type=float, default=15.0, help="seconds of timed rounds per comparison")
    results_argument(p)
    return p


def results_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", type=Path, help="results file (default: benchmarks/results/<script>.json)")


def start(args: argparse.Namespace) -> torch.device:
    """Apply --threads, seed, note the start (`begin`) and print the machine line; the device is CUDA when
    there is one."""
    torch.manual_seed(0)
    begin(args.threads)
    print(machine())
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def begin(threads: int = 1) -> None:
    """Set torch's threads (a script that runs `attnx train` children: 1, as their `threads`) and note what
    `record` reports of the start: the time, the load and the commit that runs."""
    torch.set_num_threads(threads)
    _started.update(
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        clock=time.perf_counter(),
        load=[round(x, 2) for x in os.getloadavg()],
        commit=commit(),
    )


def machine() -> str:
    """One line: the machine, its software and its load now."""
    m = machine_facts()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, {m['gpu'] or 'no GPU'}; "
        f"Python {m['python']}, torch {m['torch']}, Lightning {m['lightning']}, {m['threads']} thread(s); "
        f"load average {load}"
    )


def machine_facts() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        ram = float("nan")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(ram, 1),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": metadata.version("lightning"),
        "threads": torch.get_num_threads(),
    }


def commit() -> dict[str, Any] | None:
    """HEAD, and whether files that can change a measurement differ from it (None outside a git checkout)."""

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True, check=True).stdout

    try:
        head = git("rev-parse", "HEAD").strip()
        changed = [line[3:] for line in git("status", "--porcelain").splitlines()]
    except (OSError, subprocess.CalledProcessError):
        return None
    measured = [path for path in changed if not path.startswith(WRITTEN) and not path.endswith(".md")]
    return {"sha": head, "dirty": bool(measured)}


def command() -> str:
    """The command line that runs this script, from the repository root; a folder outside the repository
    (another checkout, a scratch folder) by what it is, not by this machine's path."""
    return shlex.join(["python", shown(str(Path(sys.argv[0]).resolve())), *map(shown, sys.argv[1:])])


def shown(arg: str) -> str:
    """An argument as a results file records it: a path in the repository relative to it; one outside as
    `<checkout of SHA>` when it is a git checkout, else `<folder>`; an override's path (`store=DIR`) the same
    way; anything else as given."""
    key, equals, value = arg.partition("=")
    if equals and not arg.startswith("-") and value.startswith("/"):
        return f"{key}={shown(value)}"
    path = Path(arg)
    if not path.is_absolute() or not path.exists():
        return arg
    path = path.resolve()
    if path.is_relative_to(REPO):
        return str(path.relative_to(REPO))
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True).stdout
    return f"<checkout of {sha[:10]}>" if sha.strip() else "<folder>"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], right_from: int | None = None) -> dict:
    """A table as results files hold it: rendered by attnx.table.markdown_table, here and in publish.py."""
    return {"header": list(header), "rows": [list(row) for row in rows], "right_from": right_from}


def parse_table(markdown: str) -> dict:
    """A Markdown table as `table` holds it, back from markdown_table's text (cells as text; right-aligned
    from the first column whose rule ends in `:`)."""
    lines = [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in markdown.strip().splitlines()]
    cells = [[c.strip() for c in line] for line in lines]
    right = [i for i, rule in enumerate(cells[1]) if rule.endswith(":")]
    return table(cells[0], cells[2:], right[0] if right else None)


def record(
    args: argparse.Namespace,
    tables: Mapping[str, dict] | None = None,
    values: Mapping[str, Any] | None = None,
    headlines: Sequence[Mapping[str, str]] = (),
    name: str | None = None,
    texts: Mapping[str, str] | None = None,
) -> Path:
    """Print `tables` and write the results file: `args.results`, else benchmarks/results/<name>.json
    (`name`: the script's own by default). `values` are the figures prose cites; `headlines` the rows of
    benchmarks/README.md's summary (what, goal, measured, verdict); `texts` a command's printed output,
    shown as a text block."""
    if not _started:
        begin()
    for title, t in (tables or {}).items():
        print(f"\n{title}:\n{markdown_table(t['header'], t['rows'], t['right_from'])}")
    doc = {
        "script": Path(sys.argv[0]).stem,
        "command": command(),
        "date": _started["date"],
        "wall_seconds": round(time.perf_counter() - _started["clock"], 1),
        "commit": _started["commit"],
        "machine": machine_facts(),
        "load": {"before": _started["load"], "after": [round(x, 2) for x in os.getloadavg()]},
        "values": dict(values or {}),
        "tables": dict(tables or {}),
        "texts": dict(texts or {}),
        "headlines": [dict(h) for h in headlines],
    }
    path = getattr(args, "results", None) or RESULTS / f"{name or doc['script']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"\nresults: {path}")
    return path


def verdict(met: bool) -> str:
    return "met" if met else "not met"


def rounds(candidates: Sequence[Callable[[], object]], device: torch.device, budget: float) -> int:
    """Rounds of all candidates that fit in `budget` seconds, from one pilot call each (5 to 50)."""
    per_round = sum(time_once(fn, device) for fn in candidates)
    return max(5, min(50, int(budget / max(per_round, 1e-6))))


def assemble(overrides: list[str], output_dir: str) -> tuple[Any, Any, Any]:
    """(task, module, trainer) exactly as `attnx train <overrides>` builds them, seeded."""
    from attnx.config.compose import compose
    from attnx.config.validation import validate
    from attnx.train.assemble import assemble

    cfg = compose([*overrides, f"paths.output_dir={output_dir}"])
    return assemble(validate(cfg), cfg)


class PlainLoop:
    """A hand-written training step for an attnx LightningModule: its own optimiser and schedule
    (from `configure_optimizers`), gradient-norm clipping and its task's loss, no Trainer."""

    def __init__(self, task: Any, module: Any, clip: float, total_steps: int, device: torch.device) -> None:
        self.model_type, self.module, self.clip, self.device = (
            task.model_type,
            module.to(device).train(),
            clip,
            device,
        )
        module.trainer = SimpleNamespace(estimated_stepping_batches=total_steps)  # all it reads
        config = module.configure_optimizers()
        self.optimizer, self.scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]

    def step(self, batch: Batch) -> float:
        batch = Batch(*(None if t is None else t.to(self.device, non_blocking=True) for t in batch))
        logits, _ = self.module(batch)
        if self.model_type == "classification":
            loss = F.cross_entropy(logits, batch.label)
        else:
            loss = self.module.loss(logits, batch)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip)
        self.optimizer.step()
        self.scheduler.step()
        return len(batch.src)


def cycling(loop: PlainLoop, task: Any, batches: int) -> Callable[[], float]:
    """A training step over the first `batches` batches of the train split, cycled, so that every
    model compared sees the same sequence lengths."""
    cycle = itertools.cycle(list(itertools.islice(task.dataloader("train"), batches)))
    return lambda: loop.step(next(cycle))


def train_child(overrides: list[str], folder: Path) -> dict:
    """One `attnx train` child process (of this checkout) run into `folder`, what it prints in
    `<folder>.log`: its results.json, with its CPU seconds (the OS's account of the whole process)."""
    command = [sys.executable, "-m", "attnx.cli", "train", *overrides, f"hydra.run.dir={folder}"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    with open(folder.with_suffix(".log"), "w") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"attnx train failed ({folder.with_suffix('.log')}): {' '.join(overrides)}")
    record = json.loads((folder / "results.json").read_text())
    record["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    return record
