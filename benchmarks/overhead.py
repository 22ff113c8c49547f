"""Benchmark 1: framework overhead — samples/s of `attnx train` vs a plain PyTorch loop.

The Lightning side is what `attnx train` runs: the composed config, and the task, module and
Trainer built by attnx.train.run (logging every `log_every_n_steps` to the CSV logger, checkpoint
callback, gradient clipping, deterministic mode), then `trainer.fit`; validation is off
(`limit_val_batches=0`) so both sides only train. The plain side trains a second copy of the same
model (same seed: same initial weights) on its own iterator over the same batches, with the module's
own optimiser, schedule, clipping and loss.

On a shared machine, load comes in bursts longer than a step, so the two run in lockstep: after each
Lightning step a callback runs one plain step, and each Lightning step is timed from one batch start
to the next minus the plain step inside it (data loading, hooks, logging and the optimiser all
included). The Trainer's one-off set-up and teardown (checkpoint writing included) are reported apart.

    python benchmarks/overhead.py [--config default,classifier,self_attn] [--epochs 2]

Goal: attnx train >= 0.95x the plain loop's samples/s.
"""

from __future__ import annotations

import logging
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import common
import lightning.pytorch as pl

from attnx.lit.datamodule import TaskDataModule

CONFIGS = {
    "default": [],  # reverse task, rnn encoder, additive attention
    "classifier": ["task=sentiment", "attention=none"],
    "self_attn": ["encoder=self_attn", "attention=multi_head"],
    # a deliberately tiny model: Lightning's fixed per-step cost shows most
    "tiny": ["attention=none", "encoder.hidden_dim=32", "encoder.embed_dim=16", "decoder.hidden_dim=32"],
}
COMMON = ["+trainer.limit_val_batches=0", "trainer.enable_progress_bar=false"]


def plain_steps(task: Any, loop: common.PlainLoop, epochs: int) -> Iterator[None]:
    """One plain training step per `next()`, over the batches Lightning sees, in its order."""
    for epoch in range(epochs):
        loader = task.dataloader("train", shuffle=True)
        loader.sampler.set_epoch(epoch)  # as Lightning does each epoch
        for batch in loader:
            loop.step(batch)
            yield


class Lockstep(pl.Callback):
    """After each Lightning step, run one plain step; time both (see the module docstring)."""

    def __init__(self, plain_step: Callable[[], None]) -> None:
        self.plain_step = plain_step
        self.lightning_seconds = self.plain_seconds = 0.0
        self.steps = 0
        self._mark: float | None = None
        self._plain_last = 0.0

    def _close_step(self) -> None:
        now = time.perf_counter()
        if self._mark is not None:
            self.lightning_seconds += now - self._mark - self._plain_last
        self._mark = now

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self._close_step()

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        started = time.perf_counter()
        self.plain_step()
        self._plain_last = time.perf_counter() - started
        self.plain_seconds += self._plain_last
        self.steps += 1

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self._close_step()  # the epoch's last step ends here (this runs before checkpointing)
        self._mark, self._plain_last = None, 0.0


def compare(overrides: list[str], epochs: int) -> list[Any]:
    with tempfile.TemporaryDirectory() as out:
        run = [*COMMON, *overrides, f"trainer.max_epochs={epochs}"]
        plain_task, plain_module, _ = common.assemble(run, out)
        task, module, trainer = common.assemble(run, out)
        total = epochs * len(task.dataloader("train"))
        loop = common.PlainLoop(
            plain_task, plain_module, trainer.gradient_clip_val, total, trainer.strategy.root_device
        )
        steps = plain_steps(plain_task, loop, epochs)
        lockstep = Lockstep(lambda: next(steps))
        trainer.callbacks.insert(0, lockstep)
        started = time.perf_counter()
        trainer.fit(module, datamodule=TaskDataModule(task))
        fit_seconds = time.perf_counter() - started
    samples = module.train_samples
    fixed = fit_seconds - lockstep.lightning_seconds - lockstep.plain_seconds
    extra_ms = (lockstep.lightning_seconds - lockstep.plain_seconds) / lockstep.steps * 1e3
    return [
        f"{' '.join(overrides) or 'attnx train'} ({lockstep.steps} steps)",
        samples / lockstep.plain_seconds,
        samples / lockstep.lightning_seconds,
        lockstep.plain_seconds / lockstep.lightning_seconds,
        extra_ms,
        fixed,
    ]


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--config", default=",".join(CONFIGS), help=f"some of {', '.join(CONFIGS)}")
    args = p.parse_args()
    common.start(args)
    logging.getLogger("lightning").setLevel(logging.ERROR)  # Trainer banners, not results
    warnings.filterwarnings("ignore")  # e.g. the unmonitored val/loss with validation off
    names = args.config.split(",")
    rows = [compare(CONFIGS[name], args.epochs) for name in names]
    header = [
        "run",
        "plain samples/s",
        "attnx samples/s",
        "attnx / plain (≥0.95)",
        "attnx ms/step over plain",
        "fit set-up+teardown s",
    ]
    ratio = dict(zip(names, (row[3] for row in rows)))  # the tiny model is there to show the cost
    full = [r for name, r in ratio.items() if name != "tiny"] or list(ratio.values())
    values = {"low": min(full), "high": max(full), "tiny": ratio.get("tiny"), "ratio": ratio}
    values |= {"extra_ms_low": min(row[4] for row in rows), "extra_ms_high": max(row[4] for row in rows)}
    tiny = f" (tiny model: {ratio['tiny']:.2f}×)" if "tiny" in ratio else ""
    headline = {
        "what": "`attnx train` vs a plain PyTorch loop, samples/s",
        "goal": "≥ 0.95×",
        "measured": f"{min(full):.2f}–{max(full):.2f}×{tiny}",
        "verdict": common.verdict(min(full) >= 0.95),
    }
    common.record(args, {"runs": common.table(header, rows)}, values, [headline])


if __name__ == "__main__":
    main()
