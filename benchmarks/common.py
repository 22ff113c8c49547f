"""What every benchmark script shares: arguments, the machine line, round budgets, markdown tables.

Scripts print their results as a markdown table to paste into benchmarks/README.md. Speeds are
ratios against a reference timed in the same process, interleaved round by round
(attnx.bench.measure.interleaved), so that load from other processes on a shared machine cancels.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from attnx.bench.measure import time_once
from attnx.tasks.base import Batch


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (train.yaml's default: 1)")
    p.add_argument("--budget", type=float, default=15.0, help="seconds of timed rounds per comparison")
    return p


def start(args: argparse.Namespace) -> torch.device:
    """Apply --threads, seed, print the machine line; the device is CUDA when there is one."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(machine())
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return (
        f"machine: {cpu}, {os.cpu_count()} cores, {gpu}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s); load average {load}"
    )


def rounds(candidates: Sequence[Callable[[], object]], device: torch.device, budget: float) -> int:
    """Rounds of all candidates that fit in `budget` seconds, from one pilot call each (5 to 50)."""
    per_round = sum(time_once(fn, device) for fn in candidates)
    return max(5, min(50, int(budget / max(per_round, 1e-6))))


def assemble(overrides: list[str], output_dir: str) -> tuple[Any, Any, Any]:
    """(task, module, trainer) exactly as `attnx train <overrides>` builds them, seeded."""
    from hydra import compose, initialize_config_dir

    from attnx.config.compose import CONF_DIR
    from attnx.config.validation import validate
    from attnx.train.assemble import assemble

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, f"paths.output_dir={output_dir}"])
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
