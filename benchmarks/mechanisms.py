"""Benchmark 4: what each attention mechanism costs per training step, seq2seq and classification.

Each model is built exactly as `attnx train task=T encoder=E attention=M` builds it (default sizes),
and trained with a plain step (forward, backward, clipping, AdamW, schedule: no Trainer) on the
same fixed batches. Mechanisms are timed round-robin, one step each per round, so load from other
processes hits all alike; the last column is each step's time relative to `none` in the same round.

    python benchmarks/mechanisms.py [--tasks reverse,sentiment] [--encoders rnn,self_attn]
"""

from __future__ import annotations

import itertools
import statistics
import tempfile

import common

from attnx import registry
from attnx.bench.measure import interleaved, ratios

BATCHES = 4  # distinct batches cycled through, so every mechanism sees the same lengths


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--tasks", default="reverse,sentiment")
    p.add_argument("--encoders", default="rnn,self_attn")
    p.add_argument("--attentions", default="none,fixed_c,additive,dot,multi_head")
    args = p.parse_args()
    device = common.start(args)
    attentions = args.attentions.split(",")
    rows = []
    for task_name, encoder in itertools.product(args.tasks.split(","), args.encoders.split(",")):
        steps = {}
        with tempfile.TemporaryDirectory() as out:
            for attention in attentions:
                run = [f"task={task_name}", f"encoder={encoder}", f"attention={attention}"]
                task, module, trainer = common.assemble(run, out)
                loop = common.PlainLoop(task, module, trainer.gradient_clip_val, 10**6, device)
                steps[attention] = common.cycling(loop, task, BATCHES)
        times = interleaved(steps, device, common.rounds(list(steps.values()), device, args.budget), warmup=3)
        relative = ratios(times, attentions[0])
        kind = registry.get("task", task_name).model_type
        for attention in attentions:
            ms = statistics.median(times[attention]) * 1e3
            rows.append([f"{task_name} ({kind})", encoder, attention, ms, 1 / relative[attention]])
    header = ["task", "encoder", "attention", "ms / step", f"× {attentions[0]}"]
    print(f"batch size: the task's default (64); {BATCHES} fixed batches cycled\n")
    task, encoder, attention, _, times_none = max(rows, key=lambda row: row[-1])
    headline = {
        "what": "training step per mechanism, seq2seq and classification",
        "goal": "—",
        "measured": f"slowest: {attention} on {task} ({encoder}), {times_none:.2f}× {attentions[0]}",
        "verdict": "",
    }
    common.record(args, {"steps": common.table(header, rows)}, headlines=[headline])


if __name__ == "__main__":
    main()
